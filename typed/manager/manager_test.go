package manager_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/predicate"
)

type (
	secret     = *corev1.Secret
	secretList = *corev1.SecretList
)

var (
	errBoom    = errors.New("boom")
	errCleanup = errors.New("cleanup failed")
)

// blocker signals on started, runs until its context ends, then closes ended.
func blocker(started chan<- struct{}, ended chan struct{}) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		started <- struct{}{}
		<-ctx.Done()
		close(ended)
		return nil
	})
}

func failing(err error) manager.Runnable {
	return manager.RunnableFunc(func(context.Context) error { return err })
}

// lines returns the lines of err's message, sorted: the errors errors.Join joined.
func lines(err error) []string {
	if err == nil {
		return nil
	}
	ls := strings.Split(err.Error(), "\n")
	slices.Sort(ls)
	return ls
}

// One runnable's error or panic stops the Manager: every other runnable's context ends,
// and Run returns every error, joined, each naming its runnable.
func TestRunStopsAtTheFirstFailureAndReturnsEveryError(t *testing.T) {
	// The runnables under test run once others (a leader one and one on every replica)
	// have started, whose contexts must then end.
	type failure func(othersStarted <-chan struct{}) manager.Runnable
	fail := func(err error) failure {
		return func(othersStarted <-chan struct{}) manager.Runnable {
			return manager.RunnableFunc(func(context.Context) error { <-othersStarted; return err })
		}
	}
	for _, tc := range []struct {
		name string
		add  map[string]failure
		want []string
		is   []error
	}{{
		name: "a clean stop returns nil",
	}, {
		name: "an error is returned, wrapped with the runnable's name",
		add:  map[string]failure{"failing": fail(errBoom)},
		want: []string{`runnable "failing": boom`},
		is:   []error{errBoom},
	}, {
		name: "a panic is recovered and returned as a *controller.PanicError",
		add: map[string]failure{"panicking": func(othersStarted <-chan struct{}) manager.Runnable {
			return manager.RunnableFunc(func(context.Context) error { <-othersStarted; panic("runnable boom") })
		}},
		want: []string{`runnable "panicking" panicked: runnable boom`},
	}, {
		name: "a runnable on every replica stops the manager too",
		add: map[string]failure{"failing": func(othersStarted <-chan struct{}) manager.Runnable {
			return manager.EveryReplica(fail(errBoom)(othersStarted))
		}},
		want: []string{`runnable "failing": boom`},
		is:   []error{errBoom},
	}, {
		name: "the errors of runnables that fail while stopping are joined",
		add: map[string]failure{
			"failing": fail(errBoom),
			"cleanup": func(<-chan struct{}) manager.Runnable {
				return manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); return errCleanup })
			},
		},
		want: []string{`runnable "cleanup": cleanup failed`, `runnable "failing": boom`},
		is:   []error{errBoom, errCleanup},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := manager.New(manager.Options{})
			started, othersStarted := make(chan struct{}, 2), make(chan struct{})
			leaderEnded, everyEnded := make(chan struct{}), make(chan struct{})
			adds := map[string]manager.Runnable{
				"leader":        blocker(started, leaderEnded),
				"every replica": manager.EveryReplica(blocker(started, everyEnded)),
			}
			for name, f := range tc.add {
				adds[name] = f(othersStarted)
			}
			for name, r := range adds {
				if err := m.Add(name, r); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			receive(t, started, "a runnable starts")
			receive(t, started, "the other runnable starts")
			close(othersStarted)
			if tc.add == nil {
				cancel()
			}
			err := receive(t, done, "Run returns")
			if diff := cmp.Diff(tc.want, lines(err)); diff != "" {
				t.Errorf("Run's error, line by line (-want +got):\n%s", diff)
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("Run = %v, which does not wrap %v", err, target)
				}
			}
			var p *controller.PanicError
			if errors.As(err, &p) && (p.Kind != "runnable" || p.Name != "panicking" || p.Value != "runnable boom" || len(p.Stack) == 0) {
				t.Errorf("PanicError = {%q, %v, %d bytes of stack}, want the panicking runnable's, with its stack", p.Name, p.Value, len(p.Stack))
			}
			if !closed(leaderEnded) || !closed(everyEnded) {
				t.Errorf("Run returned before the other runnables' contexts ended (leader: %v, every replica: %v)", closed(leaderEnded), closed(everyEnded))
			}
			goleak.VerifyNone(t)
		})
	}
}

// A runnable that ignores the end of its context cannot hold Run past the shutdown
// timeout: Run returns an error naming it, having stopped everything else.
func TestShutdownTimeoutNamesWhatDidNotStop(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil))
	m := manager.New(manager.Options{ShutdownTimeout: 100 * time.Millisecond})
	c := acquire(t, m, source(f))
	defer c.Release()
	unblock, stuck := make(chan struct{}), make(chan struct{})
	if err := m.Add("stuck", manager.RunnableFunc(func(context.Context) error {
		close(stuck)
		<-unblock // ignores its context
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	receive(t, stuck, "the stuck runnable runs")
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := receive(t, done, "Run returns after the shutdown timeout")
	want := []string{`shutdown timed out after 100ms: still running: ["stuck"]`}
	if diff := cmp.Diff(want, lines(err)); diff != "" || !errors.Is(err, manager.ErrShutdownTimeout) {
		t.Errorf("Run's error, line by line (-want +got):\n%s", diff)
	}
	eventually(t, "the cache stops though a runnable is stuck", func() bool { return f.Watching() == 0 })
	close(unblock)
	goleak.VerifyNone(t)
}

// Shutdown stops loops from taking keys, lets a reconcile in flight finish while the
// caches still run, and only then stops the caches.
func TestShutdownLetsInFlightReconcilesFinishThenStopsCaches(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil))
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(f))
	defer c.Release()
	inFlight := make(chan struct{})
	type atEnd struct {
		Cached   bool // the reconcile still reads the object from the cache
		Watching int  // the cache's watches still open
	}
	var seen atEnd
	_, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](func(ctx context.Context, req typed.Request[cm]) (typed.Result, error) {
		close(inFlight)
		<-ctx.Done() // the shutdown has begun
		_, seen.Cached = c.Get(req.Key)
		seen.Watching = f.Watching()
		return typed.Result{}, nil
	}), typed.Options{Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, m)
	receive(t, inFlight, "a reconcile is in flight")
	if err := r.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if diff := cmp.Diff(atEnd{Cached: true, Watching: 1}, seen); diff != "" {
		t.Errorf("what the in-flight reconcile saw once the shutdown began (-want +got):\n%s", diff)
	}
	if n := f.Watching(); n != 0 {
		t.Errorf("%d watches open after Run returned, want 0", n)
	}
}

// gatedSecrets is a ListerWatcher whose initial reads, a List or a watch-list, wait until
// open is closed: its cache cannot sync before.
type gatedSecrets struct {
	controller.ListerWatcher[secret, secretList]
	open chan struct{}
}

func (g gatedSecrets) wait(ctx context.Context) error {
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g gatedSecrets) List(ctx context.Context, opts metav1.ListOptions) (secretList, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return g.ListerWatcher.List(ctx, opts)
}

func (g gatedSecrets) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
	}
	return g.ListerWatcher.Watch(ctx, opts)
}

// A Loop over a cache of several namespaces reconciles each key of them, and the keys
// that a related cache maps its objects to; a mapped key of a namespace outside the
// Loop's cache is dropped.
func TestLoopReconcilesItsCacheAndRelatedKeys(t *testing.T) {
	configMaps := fake.New[cm, cmList](configMap("a", "one", nil), configMap("b", "two", nil), configMap("c", "three", nil))
	owned := func(ns, name, owner string) secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"owner": owner}}}
	}
	secrets := fake.New[secret, secretList](owned("a", "s1", "one"), owned("c", "s3", "three"))
	m := manager.New(manager.Options{})
	primary := acquire(t, m, source(configMaps), manager.CacheOptions[cm]{Namespaces: []string{"a", "b"}})
	defer primary.Release()
	related, err := manager.Acquire(m, sourceOf(secrets))
	if err != nil {
		t.Fatal(err)
	}
	defer related.Release()
	got := newReconciles()
	loop, err := manager.NewLoop(primary, typed.ReconcilerFunc[cm](got.reconcile), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := manager.Related(loop, related, func(s secret) []string { return []string{s.Namespace + "/" + s.Annotations["owner"]} }); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	for range 2 {
		receive(t, got.ch, "the initial reconciles")
	}
	if diff := cmp.Diff([]string{"a/one", "b/two"}, got.all()); diff != "" {
		t.Errorf("keys reconciled at start (-want +got):\n%s", diff)
	}
	// The related cache has one controller, which hands its events to the Loop in order: a
	// key of c's, were it not dropped, would be reconciled before a/one.
	_ = must(secrets.Update(owned("c", "s3", "three")))
	_ = must(secrets.Update(owned("a", "s1", "one")))
	if key := receive(t, got.ch, "the related change reconciles its owner"); key != "a/one" {
		t.Errorf("reconciled %s, want a/one", key)
	}
}

func TestProbes(t *testing.T) {
	configMaps := fake.New[cm, cmList](configMap("a", "one", nil))
	open := make(chan struct{})
	secrets := gatedSecrets{ListerWatcher: fake.New[secret, secretList](), open: open}
	m := manager.New(manager.Options{})
	primary := acquire(t, m, source(configMaps), manager.CacheOptions[cm]{Namespaces: []string{"a"}})
	defer primary.Release()
	related, err := manager.Acquire(m, manager.ClusterScoped[secret](secrets))
	if err != nil {
		t.Fatal(err)
	}
	defer related.Release()
	loop, err := manager.NewLoop(primary, typed.ReconcilerFunc[cm](newReconciles().reconcile), typed.Options{Name: "owners"})
	if err != nil {
		t.Fatal(err)
	}
	if err := manager.Related(loop, related, func(secret) []string { return nil }); err != nil {
		t.Fatal(err)
	}
	healthz, readyz := m.HealthzHandler(), m.ReadyzHandler()
	probes := func() map[string]probe {
		return map[string]probe{"/healthz": get(healthz, "/healthz"), "/readyz": get(readyz, "/readyz")}
	}
	notSynced := func(caches string) probe {
		return probe{503, "[+]manager ok\n[-]loop owners failed: caches not synced: [" + caches + "]\nreadyz check failed\n"}
	}
	healthy := probe{200, "[+]manager ok\nhealthz check passed\n"}

	if diff := cmp.Diff(map[string]probe{
		"/healthz": {503, "[-]manager failed: not started\nhealthz check failed\n"},
		"/readyz":  {503, "[-]manager failed: not started\n[-]loop owners failed: caches not synced: [\"*v1.ConfigMap namespace=a\" \"*v1.Secret\"]\nreadyz check failed\n"},
	}, probes()); diff != "" {
		t.Errorf("before Run (-want +got):\n%s", diff)
	}

	r := start(t, m)
	if err := primary.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]probe{"/healthz": healthy, "/readyz": notSynced(`"*v1.Secret"`)}, probes()); diff != "" {
		t.Errorf("running, with the related cache not synced (-want +got):\n%s", diff)
	}

	close(open)
	if err := related.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]probe{
		"/healthz": healthy,
		"/readyz":  {200, "[+]manager ok\n[+]loop owners ok\nreadyz check passed\n"},
	}, probes()); diff != "" {
		t.Errorf("every cache synced (-want +got):\n%s", diff)
	}

	if err := m.AddReadyCheck("database", func(*http.Request) error { return errors.New("unreachable") }); err != nil {
		t.Fatal(err)
	}
	if err := m.AddHealthCheck("panicking", func(*http.Request) error { panic("check boom") }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]probe{
		"/healthz": {503, "[+]manager ok\n[-]panicking failed: panicked: check boom\nhealthz check failed\n"},
		"/readyz":  {503, "[+]manager ok\n[+]loop owners ok\n[-]database failed: unreachable\nreadyz check failed\n"},
	}, probes()); diff != "" {
		t.Errorf("with failing checks of the user's (-want +got):\n%s", diff)
	}

	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]probe{
		"/healthz": {503, "[-]manager failed: stopped\n[-]panicking failed: panicked: check boom\nhealthz check failed\n"},
		"/readyz":  {503, "[-]manager failed: stopped\n[+]loop owners ok\n[-]database failed: unreachable\nreadyz check failed\n"},
	}, probes()); diff != "" {
		t.Errorf("after Run returned (-want +got):\n%s", diff)
	}
}

// Run serves the probes on Options.HealthProbeListener while it runs, and closes it.
func TestProbesServedWhileRunning(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := manager.New(manager.Options{HealthProbeListener: l})
	r := run(t, m)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	url := "http://" + l.Addr().String()
	got := map[string]int{}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := client.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		got[path] = resp.StatusCode
	}
	if diff := cmp.Diff(map[string]int{"/healthz": 200, "/readyz": 200}, got); diff != "" {
		t.Errorf("probe status codes (-want +got):\n%s", diff)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Get(url + "/healthz"); err == nil {
		_ = resp.Body.Close()
		t.Errorf("the probe server still answers after Run returned: %s", resp.Status)
	}
}

func TestRunFailsWhenItCannotServeProbes(t *testing.T) {
	m := manager.New(manager.Options{HealthProbeAddress: "no-such-host.invalid:http"})
	ran := false
	if err := m.Add("never", manager.RunnableFunc(func(context.Context) error { ran = true; return nil })); err != nil {
		t.Fatal(err)
	}
	err := m.Run(testContext(t))
	if err == nil || !strings.Contains(err.Error(), "serving health probes") || ran {
		t.Errorf("Run = %v (ran a runnable: %v), want a probe-serving error before running anything", err, ran)
	}
	goleak.VerifyNone(t)
}

// A runnable added while the Manager runs starts at once.
func TestRunnablesAddedWhileRunningStart(t *testing.T) {
	m := manager.New(manager.Options{})
	run(t, m)
	started := map[string]chan struct{}{"leader": make(chan struct{}), "every replica": make(chan struct{})}
	for name, ch := range started {
		r := manager.Runnable(manager.RunnableFunc(func(ctx context.Context) error { close(ch); <-ctx.Done(); return nil }))
		if name == "every replica" {
			r = manager.EveryReplica(r)
		}
		if err := m.Add(name, r); err != nil {
			t.Fatal(err)
		}
	}
	for name, ch := range started {
		receive(t, ch, name+" runnable added while running starts")
	}
}

type panickyRunnable struct{}

func (panickyRunnable) Run(context.Context) error { return nil }
func (panickyRunnable) NeedLeaderElection() bool  { panic("asked") }

func TestBadArgumentsAreErrorsNotPanics(t *testing.T) {
	f := fake.New[cm, cmList]()
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(f))
	released := acquire(t, m, source(f))
	released.Release()
	other := manager.New(manager.Options{})
	otherCache := acquire(t, other, source(f))
	defer otherCache.Release()
	loop, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](newReconciles().reconcile), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := manager.New(manager.Options{})
	ended, cancel := context.WithCancel(testContext(t))
	cancel()
	if err := stopped.Run(ended); err != nil {
		t.Fatal(err)
	}
	var nilFunc manager.RunnableFunc
	var nilManager *manager.Manager
	var nilReconciler typed.ReconcilerFunc[cm]
	var nilCache *manager.Cache[cm]
	nilRegistration, addToNil := nilCache.AddHandler("h", controller.HandlerFunc[cm](func(context.Context, event.Event[cm]) {}))
	keysOf := func(cm) []string { return nil }
	newLoop := func(c *manager.Cache[cm], r typed.Reconciler[cm], preds ...predicate.Predicate[cm]) error {
		_, err := manager.NewLoop(c, r, typed.Options{}, preds...)
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"Add of a nil runnable", m.Add("nil", nil), controller.ErrNilArgument},
		{"Add of a nil RunnableFunc", m.Add("nil func", nilFunc), controller.ErrNilArgument},
		{"Add of EveryReplica(nil)", m.Add("every nil", manager.EveryReplica(nil)), controller.ErrNilArgument},
		{"Add to a nil manager", nilManager.Add("x", failing(nil)), controller.ErrNilArgument},
		{"Add to a stopped manager", stopped.Add("late", failing(nil)), manager.ErrStopped},
		{"Run of a nil manager", nilManager.Run(testContext(t)), controller.ErrNilArgument},
		{"Run twice", stopped.Run(testContext(t)), controller.ErrAlreadyRunning},
		{"a nil check", m.AddReadyCheck("nil", nil), controller.ErrNilArgument},
		{"NewLoop of a nil cache", newLoop(nil, nilReconciler), controller.ErrNilArgument},
		{"NewLoop of a nil reconciler", newLoop(c, nilReconciler), controller.ErrNilArgument},
		{"NewLoop with a nil predicate", newLoop(c, typed.ReconcilerFunc[cm](newReconciles().reconcile), nil), controller.ErrNilArgument},
		{"NewLoop of a released cache", newLoop(released, typed.ReconcilerFunc[cm](newReconciles().reconcile)), manager.ErrReleased},
		{"WaitForSync of the registration a nil cache gave", nilRegistration.WaitForSync(testContext(t)), controller.ErrNilArgument},
		{"Related to a nil loop", manager.Related[cm, cm](nil, c, keysOf), controller.ErrNilArgument},
		{"Related of a nil cache", manager.Related[cm](loop, nil, keysOf), controller.ErrNilArgument},
		{"Related with a nil mapping", manager.Related(loop, c, nil), controller.ErrNilArgument},
		{"Related of a released cache", manager.Related(loop, released, keysOf), manager.ErrReleased},
		{"WaitForSync of a nil cache", nilCache.WaitForSync(testContext(t)), controller.ErrNilArgument},
		{"AddHandler to a nil cache", addToNil, controller.ErrNilArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.want) {
				t.Errorf("got %v, want %v", tc.err, tc.want)
			}
		})
	}
	_, found := nilCache.Get("a/one")
	if found || nilCache.List() != nil || nilCache.Len() != 0 || nilCache.HasSynced() || !closed(nilCache.Release()) {
		t.Error("a nil cache or registration does not read as empty")
	}
	for name, err := range map[string]error{
		"Add of a runnable whose NeedLeaderElection panics": m.Add("panicky", panickyRunnable{}),
		"Related of another manager's cache":                manager.Related(loop, otherCache, keysOf),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
