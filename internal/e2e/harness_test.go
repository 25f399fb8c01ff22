package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// waitTimeout bounds every wait for a condition. It is generous on purpose: the tests
// must not depend on how fast the machine is, only on what eventually happens.
const waitTimeout = 60 * time.Second

type (
	cm     = *corev1.ConfigMap
	cmList = *corev1.ConfigMapList
)

// ---------------------------------------------------------------------------------------
// Control plane and clients

// startControlPlane starts a control plane of the test's own, stopped when it ends.
func startControlPlane(t *testing.T) *testenv.Environment {
	t.Helper()
	started := time.Now()
	cp := testenv.Start(t, testenv.Options{})
	t.Logf("control plane started in %v", time.Since(started).Round(time.Millisecond))
	return cp
}

// clients are a typed, a dynamic and a metadata client that share connections of their
// own.
type clients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	meta metadata.Interface
}

// newClients returns clients for cfg over connections that are closed when the test ends.
// client-go otherwise shares one transport per TLS configuration for the life of the
// process, and each of its HTTP/2 connections keeps a reader goroutine; closing the
// connections is what lets the final goroutine check see none at all.
func newClients(t *testing.T, cfg *rest.Config) clients {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	d := connrotation.NewDialer((&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Dial = d.DialContext // a config with its own Dial also gets its own transport
	t.Cleanup(d.CloseAll)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return clients{kube: kube, dyn: dyn, meta: meta}
}

// setUp is how a test begins: the final leak check, a control plane of its own, and an
// admin's clients, with namespaces created.
func setUp(t *testing.T, namespaces ...string) (*testenv.Environment, clients) {
	t.Helper()
	checkLeaksAtEnd(t)
	cp := startControlPlane(t)
	admin := newClients(t, cp.AdminConfig())
	createNamespaces(t, admin.kube, namespaces...)
	return cp, admin
}

func createNamespaces(t *testing.T, kube kubernetes.Interface, names ...string) {
	t.Helper()
	for _, name := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := kube.CoreV1().Namespaces().Create(timeout(t), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s: %v", name, err)
		}
	}
}

// timeout returns a context for one request or one wait, ended with the test.
func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// try runs one request of a polling loop with a timeout of its own and reports whether
// it succeeded.
func try(t *testing.T, f func(context.Context) error) bool {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	return f(ctx) == nil
}

// listConfigMaps returns a function that lists every ConfigMap of namespace ("" for all)
// with a consistent read.
func listConfigMaps(kube kubernetes.Interface, namespace string) func(context.Context) ([]cm, error) {
	return func(ctx context.Context) ([]cm, error) {
		return listed[cm](kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{}))
	}
}

// listed returns the items of a list that List returned, as pointers:
// listed[*corev1.Pod](pods.List(ctx, opts)).
func listed[T runtime.Object](l runtime.Object, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	objs, err := meta.ExtractList(l)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(objs))
	for i, o := range objs {
		obj, ok := o.(T)
		if !ok {
			return nil, fmt.Errorf("the list holds a %T, want a %T", o, obj)
		}
		out[i] = obj
	}
	return out, nil
}

// ---------------------------------------------------------------------------------------
// Goroutine leaks

// clientGoroutines are the goroutines that belong to HTTP clients and to the control
// plane, not to a controller: the reader and writer of each pooled connection, which live
// until the connection is closed, and the waiter of each etcd or kube-apiserver process.
// They are ignored only by the check right after Run returns; the check at the end of the
// test, after every connection is closed and the control plane stopped, ignores nothing
// that was not running before the test started.
var clientGoroutines = []goleak.Option{
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"),
	goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
	goleak.IgnoreAnyFunction(testenv.WaiterFunction),
	spawner,
}

// spawner is the goroutine, locked to its OS thread, from which the control plane forks
// etcd and kube-apiserver; it lives as long as the test binary by design (see
// testenv's startCommand), so even the final check ignores it.
var spawner = goleak.IgnoreAnyFunction(testenv.SpawnerFunction)

// checkLeaksAtEnd makes the test fail if any goroutine started after this call is still
// running once every cleanup registered later (control plane, connections, controllers)
// has run. Call it first. A subtest that shares its parent's control plane and clients
// passes clientGoroutines, since those outlive it.
func checkLeaksAtEnd(t *testing.T, ignore ...goleak.Option) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := findLeaks(t, 30*time.Second, append([]goleak.Option{before, spawner}, ignore...)...); err != nil {
			t.Errorf("goroutines left after the test: %v", err)
		}
	})
}

// findLeaks retries goleak.Find for up to d, so that goroutines on their way out do not
// count. It logs when they took more than a few seconds to go.
func findLeaks(t *testing.T, d time.Duration, opts ...goleak.Option) error {
	started := time.Now()
	deadline := started.Add(d)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			if took := time.Since(started); err == nil && took > 3*time.Second {
				t.Logf("goroutines took %v to end", took.Round(time.Millisecond))
			}
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------------------
// Running controllers

type runnable interface{ Run(context.Context) error }

// start runs the controllers until the returned stop function is called (or the test
// ends). stop cancels their context, waits for every Run to return, and then checks that
// no goroutine started since start is left other than clientGoroutines: Run must not
// leave any goroutine of its own behind. Everything else the test started after start
// (churn workers, clock pumps) must have ended before stop is called.
func start(t *testing.T, cs ...runnable) (stop func()) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, len(cs))
	for _, c := range cs {
		go func() { done <- c.Run(ctx) }()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			deadline := time.After(waitTimeout)
			for range cs {
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Run returned %v", err)
					}
				case <-deadline:
					t.Errorf("Run did not return within %v after its context ended", waitTimeout)
					return
				}
			}
			if err := findLeaks(t, 20*time.Second, append([]goleak.Option{before}, clientGoroutines...)...); err != nil {
				t.Errorf("goroutines left after Run returned: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// runAll runs functions together through typed.RunAll, as a program runs its controllers
// and loops: start(t, runAll{c.Run, loop.Run}).
type runAll []func(context.Context) error

func (fns runAll) Run(ctx context.Context) error { return typed.RunAll(ctx, fns...) }

// registered fails the test if AddHandler failed: registered(t)(c.AddHandler(name, h)).
func registered(t *testing.T) func(*controller.Registration, error) *controller.Registration {
	return func(reg *controller.Registration, err error) *controller.Registration {
		t.Helper()
		if err != nil {
			t.Fatalf("adding a handler: %v", err)
		}
		return reg
	}
}

func waitSynced(t *testing.T, what string, synced <-chan struct{}) {
	t.Helper()
	select {
	case <-synced:
	case <-time.After(waitTimeout):
		t.Fatalf("%s did not sync within %v", what, waitTimeout)
	}
}

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !poll(cond) {
		t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
	}
}

// waitUntil is waitFor with a cond that also says why it does not hold yet: the last
// reason is in the failure.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	if !poll(func() (ok bool) { ok, last = cond(); return ok }) {
		t.Fatalf("timed out after %v waiting for %s: %s", waitTimeout, what, last)
	}
}

// receive returns the next value from ch (the zero value once ch is closed), failing the
// test with what and the module's goroutines if none comes within waitTimeout.
func receive[V any](t *testing.T, ch <-chan V, what string) V {
	t.Helper()
	return testwait.Receive(t, ch, what, waitTimeout)
}

func poll(cond func() bool) bool {
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// ---------------------------------------------------------------------------------------
// Observing controllers: errors, metrics, fake clocks

// errorLog records what a controller reports through Options.OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) handle(_ context.Context, err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func (l *errorLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)
}

func (l *errorLog) any(pred func(error) bool) bool {
	for _, err := range l.all() {
		if pred(err) {
			return true
		}
	}
	return false
}

// noHandlerPanics fails the test for every handler panic reported: a panic in a checking
// handler is a test bug that would otherwise hide as a lost event.
func (l *errorLog) noHandlerPanics(t *testing.T) {
	t.Helper()
	for _, err := range l.all() {
		if _, ok := err.(*controller.PanicError); ok {
			t.Errorf("handler panicked: %v", err)
		}
	}
}

// counters implements controller.Metrics with the counts the tests look at.
type counters struct {
	lists, watchEvents atomic.Int64
}

func (m *counters) Listed(string, int, time.Duration)            { m.lists.Add(1) }
func (m *counters) WatchEvent(string, watch.EventType)           { m.watchEvents.Add(1) }
func (m *counters) ResourceVersion(string, string)               {}
func (m *counters) ListWatchError(string)                        {}
func (m *counters) EventQueueDepth(string, int)                  {}
func (m *counters) HandlerLatency(string, string, time.Duration) {}
func (m *counters) HandlerPanic(string, string)                  {}

var _ controller.Metrics = (*counters)(nil)

// waitCutOff waits until a controller whose backoff timers run on clk has reported more
// than errsBefore errors and waits out its backoff: it then sends no request until clk is
// stepped, whatever happens on the server meanwhile. This is how the tests change things
// "while the controller's watch is down" without depending on timing.
func waitCutOff(t *testing.T, errs *errorLog, errsBefore int, clk *testingclock.FakeClock) {
	t.Helper()
	waitFor(t, "the controller to report an error and back off", func() bool {
		return errs.count() > errsBefore && clk.HasWaiters()
	})
}

// pumpClock steps clk past any backoff whenever the controller waits on it, until the
// returned function is called, so that the controller retries at once from then on.
func pumpClock(t *testing.T, clk *testingclock.FakeClock) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if clk.HasWaiters() {
				clk.Step(time.Hour)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// requests wraps a ListerWatcher and records the requests the reflector makes, so that
// tests can tell a relist from a re-watch, a paged list from a watch-list, and check the
// resource versions asked for.
type requests[T event.Object, L reflect.List] struct {
	lw controller.ListerWatcher[T, L]

	mu         sync.Mutex
	lists      []metav1.ListOptions
	watches    []metav1.ListOptions
	watchLists []metav1.ListOptions
}

func (r *requests[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	r.mu.Lock()
	r.lists = append(r.lists, opts)
	r.mu.Unlock()
	return r.lw.List(ctx, opts)
}

func (r *requests[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	r.mu.Lock()
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		r.watchLists = append(r.watchLists, opts)
	} else {
		r.watches = append(r.watches, opts)
	}
	r.mu.Unlock()
	return r.lw.Watch(ctx, opts)
}

// snapshot returns copies of the recorded lists, watches and watch-lists.
func (r *requests[T, L]) snapshot() (lists, watches, watchLists []metav1.ListOptions) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lists), slices.Clone(r.watches), slices.Clone(r.watchLists)
}

// ---------------------------------------------------------------------------------------
// Handler helpers

// delayed wraps a handler to make it slow, so that its backlog fills up and gets
// compressed while the others keep up.
type delayed[T event.Object] struct {
	h controller.Handler[T]
	d time.Duration
}

func (s delayed[T]) Handle(ctx context.Context, e event.Event[T]) {
	time.Sleep(s.d)
	s.h.Handle(ctx, e)
}

// ---------------------------------------------------------------------------------------
// Convergence

// view is one side's idea of the objects: key -> resource version, or a description
// that includes it (see describedStoreView).
type view struct {
	name string
	rvs  func() map[string]string
}

func storeView[T event.Object](s *eventcache.Store[T]) view {
	return describedStoreView(s, "controller.Store()", resourceVersion[T])
}

// describedStoreView is a store's view with describe(obj) for each object instead of its
// resource version alone, to be compared with convergeDescribed.
func describedStoreView[T event.Object](s *eventcache.Store[T], name string, describe func(T) string) view {
	return view{name: name, rvs: func() map[string]string {
		out := map[string]string{}
		s.Range(func(key string, obj T) bool {
			out[key] = describe(obj)
			return true
		})
		return out
	}}
}

func handlerView[T event.Object](c *eventcheck.Checker[T]) view {
	return view{name: "handler " + c.Name(), rvs: c.Versions}
}

func resourceVersion[T event.Object](o T) string { return o.GetResourceVersion() }

func serverRVs[T event.Object](objs []T, describe func(T) string) (map[string]string, error) {
	out := make(map[string]string, len(objs))
	for _, o := range objs {
		key, err := event.ObjectKey(o)
		if err != nil {
			return nil, err
		}
		out[key] = describe(o)
	}
	return out, nil
}

// converge waits until every view equals a fresh list from the server, listed again on
// every try, and fails the test with the differences after waitTimeout.
func converge[T event.Object](t *testing.T, list func(context.Context) ([]T, error), views ...view) {
	t.Helper()
	convergeDescribed(t, list, resourceVersion[T], views...)
}

// convergeDescribed is converge with the server's objects described by describe, which
// should include the resource version, so that equal descriptions mean equal states.
func convergeDescribed[T event.Object](t *testing.T, list func(context.Context) ([]T, error), describe func(T) string, views ...view) {
	t.Helper()
	var server map[string]string
	var listErr error
	ok := poll(func() bool {
		var objs []T
		if !try(t, func(ctx context.Context) error {
			objs, listErr = list(ctx)
			return listErr
		}) {
			return false
		}
		if server, listErr = serverRVs(objs, describe); listErr != nil {
			return false
		}
		for _, v := range views {
			if !cmp.Equal(server, v.rvs()) {
				return false
			}
		}
		return true
	})
	if ok {
		return
	}
	if listErr != nil {
		t.Fatalf("listing from the server: %v", listErr)
	}
	for _, v := range views {
		if diff := cmp.Diff(server, v.rvs()); diff != "" {
			t.Errorf("%s did not converge to the server's list within %v (-server +%s):\n%s", v.name, waitTimeout, v.name, diff)
		}
	}
	t.FailNow()
}

// assertMatchesServer compares every view with one fresh list from the server, once. It
// is the final check of each test, after the controller has stopped.
func assertMatchesServer[T event.Object](t *testing.T, list func(context.Context) ([]T, error), views ...view) {
	t.Helper()
	objs, err := list(timeout(t))
	if err != nil {
		t.Fatalf("listing from the server: %v", err)
	}
	server, err := serverRVs(objs, resourceVersion[T])
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range views {
		if diff := cmp.Diff(server, v.rvs()); diff != "" {
			t.Errorf("%s differs from a fresh list (-server +%s):\n%s", v.name, v.name, diff)
		}
	}
}

// assertDeletionsDelivered checks, for every key in gone (deleted on the server and not
// re-created), that it is absent from the store and that the handler's last event for it
// is a deletion. A key the handler never heard of is allowed only if allowUnseen: an
// addition and a deletion that were both pending cancel out by design.
func assertDeletionsDelivered[T event.Object](t *testing.T, store *eventcache.Store[T], c *eventcheck.Checker[T], gone []string, allowUnseen bool) {
	t.Helper()
	for _, key := range gone {
		if _, ok := store.Get(key); ok {
			t.Errorf("%s was deleted on the server but is still in the store", key)
		}
		evs := c.Events(key)
		if len(evs) == 0 {
			if !allowUnseen {
				t.Errorf("handler %s never saw %s, which was deleted", c.Name(), key)
			}
			continue
		}
		if last := evs[len(evs)-1].Event; last.Type != event.Deleted {
			t.Errorf("handler %s: the last event of %s, deleted on the server, is %v, want a deletion", c.Name(), key, last)
		}
	}
}

// describe renders events for failure messages.
func describe[T event.Object](evs []event.Event[T]) string {
	parts := make([]string, len(evs))
	for i, e := range evs {
		parts[i] = fmt.Sprintf("%v uid=%s", e, e.Object.GetUID())
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
