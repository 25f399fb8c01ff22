package typed_test

// End-to-end tests of package typed against a real etcd and kube-apiserver
// (internal/controlplane). Each test starts its own control plane (about three
// seconds), works in its own namespaces, polls for conditions with generous timeouts
// instead of sleeping, and checks at the end that the controllers, loops and leader
// elections it ran left no goroutine behind. They run after the package's unit tests,
// one at a time (see e2eControlPlane), and take about 45 seconds in all with -race.
// Their names begin with TestE2E, by which `make unit` skips them.
//
// Three of them guard against bugs they found: the Lease released while lead still ran
// (TestE2ELeaderElectionReleasesTheLeaseOnlyAfterLeadReturns), queued keys reconciled
// after the loop's context ended (TestE2ELoopStartsNoReconcileAfterItsContextEnds) and
// a goroutine left by a stopped dynamic watch (TestE2EDynamicWatchStopEndsItsGoroutine).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/controlplane"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
)

// e2eSerial runs the end-to-end tests one at a time.
var e2eSerial sync.Mutex

// e2eControlPlane starts a control plane for t and returns it with an admin clientset.
//
// The end-to-end tests are parallel tests, so that they run only after every sequential
// test of the package, one at a time (e2eSerial): starting a control plane leaves a
// goroutine for the rest of the process (internal/controlplane's startCommand keeps an
// OS thread alive for the parent-death signal), which the goleak.VerifyNone checks of
// the unit tests would report if an end-to-end test ran before them. One at a time,
// because concurrent control planes would make timing-sensitive tests (leader election)
// flaky under load, and because each test checks its own goroutines.
func e2eControlPlane(t *testing.T) (*controlplane.ControlPlane, *kubernetes.Clientset) {
	t.Helper()
	t.Parallel()
	e2eSerial.Lock()
	t.Cleanup(e2eSerial.Unlock)
	cp := controlplane.StartForTest(t)
	return cp, kubernetes.NewForConfigOrDie(cp.AdminConfig())
}

// verifyNoLeaks is goleak.VerifyNone for the unit tests, which also run after end-to-end
// tests when the package's tests are repeated (-count): it ignores the goroutine that a
// control plane leaves for the rest of the process (see e2eControlPlane), and only that.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	goleak.VerifyNone(t, goleak.IgnoreTopFunction(controlplane.SpawnerFunction))
}

// e2eNamespace creates a namespace.
func e2eNamespace(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// e2eNoLeaks takes a snapshot of the goroutines running now and registers a cleanup,
// run before those registered earlier (so before the control plane stops), that fails
// t if goroutines other than those and the HTTP client's idle connections are left.
// Cleanups registered after it (the ones stopping controllers) run before it.
func e2eNoLeaks(t *testing.T, extra ...goleak.Option) {
	t.Helper()
	opts := append([]goleak.Option{goleak.IgnoreCurrent(),
		// Kept-alive connections to the API server belong to the shared transport of
		// client-go, not to the code under test.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"),
	}, extra...)
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// e2eGoroutines returns the stacks of the goroutines that run any of fns (function names
// or "created by" lines as they appear in a stack trace) and, unless states is empty, are
// blocked in one of states (as in "goroutine 7 [chan send]:").
func e2eGoroutines(fns []string, states ...string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if !slices.ContainsFunc(fns, func(fn string) bool { return strings.Contains(g, fn) }) {
			continue
		}
		if len(states) == 0 || slices.ContainsFunc(states, func(st string) bool { return strings.Contains(header, "["+st) }) {
			out = append(out, g)
		}
	}
	return out
}

// e2eRun runs fns together (typed.RunAll) until the test ends, and checks they return
// no error. Register it after e2eNoLeaks so that everything is stopped before the check.
func e2eRun(t *testing.T, fns ...func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- typed.RunAll(ctx, fns...) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("RunAll: %v", err)
			}
		case <-time.After(testTimeout):
			t.Errorf("controllers did not stop within %v", testTimeout)
		}
	})
}

// e2eEventually polls cond until it returns true, failing t with the last description
// cond gave when testTimeout passes.
func e2eEventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, testTimeout, true,
		func(context.Context) (bool, error) {
			var ok bool
			ok, last = cond()
			return ok, nil
		})
	if err != nil {
		t.Fatalf("%s: not within %v: %s", what, testTimeout, last)
	}
}

// e2eItems returns pointers to the items of a typed list.
func e2eItems[E any](items []E) []*E {
	out := make([]*E, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// e2eByKey describes objects by key with describe (which should include the resource
// version, so that equal maps mean equal states).
func e2eByKey[T event.Object](t *testing.T, objs []T, describe func(T) string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(objs))
	for _, obj := range objs {
		key, err := event.ObjectKey(obj)
		if err != nil {
			t.Fatalf("key of %v: %v", obj, err)
		}
		out[key] = describe(obj)
	}
	return out
}

// e2eConverges waits until c's store holds exactly what a fresh list returns.
func e2eConverges[T event.Object, L reflect.List](t *testing.T, what string, c *controller.Controller[T, L],
	fresh func() ([]T, error), describe func(T) string) {
	t.Helper()
	e2eEventually(t, what+": store converges to a fresh list", func() (bool, string) {
		listed, err := fresh()
		if err != nil {
			return false, "list: " + err.Error()
		}
		want, got := e2eByKey(t, listed, describe), e2eByKey(t, c.Store().List(), describe)
		if len(want) == 0 {
			return false, "the fresh list is empty: the test set nothing up"
		}
		return cmp.Equal(want, got), "(-list +store):\n" + cmp.Diff(want, got)
	})
}

// ---------------------------------------------------------------------------------
// Leader election with two replicas.

// A leader cut off from the Lease gives up at most a retry period and a renew deadline
// after its last renewal; a successor acquires no earlier than a lease duration after
// it. The lease duration leaves more than two seconds between the two, so that the
// partitioned test's "never two leaders" holds under the race detector on a loaded
// machine (with 3s the margin was 0.2-1.5s).
const (
	e2eLeaseDuration = 5 * time.Second
	e2eRenewDeadline = 2 * time.Second
	e2eRetryPeriod   = 500 * time.Millisecond
	// e2eHandOverBound is the longest a hand-over may take: a lease duration and a
	// generous number of retry periods (client-go jitters each one by up to 1.2x).
	e2eHandOverBound = e2eLeaseDuration + 10*e2eRetryPeriod
)

// e2eCuttableLeases is a LeasesGetter whose Get, Create and Update start failing once
// cut is set, as if the replica had lost its connection to the API server: it can
// neither renew nor release its lease.
type e2eCuttableLeases struct {
	coordinationv1.LeasesGetter
	cut atomic.Bool
}

var errE2ECut = errors.New("e2e: this replica is cut off from the API server")

func (c *e2eCuttableLeases) Leases(namespace string) coordinationv1.LeaseInterface {
	return &e2eCuttableLease{LeaseInterface: c.LeasesGetter.Leases(namespace), cut: &c.cut}
}

type e2eCuttableLease struct {
	coordinationv1.LeaseInterface
	cut *atomic.Bool
}

func (l *e2eCuttableLease) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordv1.Lease, error) {
	if l.cut.Load() {
		return nil, errE2ECut
	}
	return l.LeaseInterface.Get(ctx, name, opts)
}

func (l *e2eCuttableLease) Create(ctx context.Context, lease *coordv1.Lease, opts metav1.CreateOptions) (*coordv1.Lease, error) {
	if l.cut.Load() {
		return nil, errE2ECut
	}
	return l.LeaseInterface.Create(ctx, lease, opts)
}

func (l *e2eCuttableLease) Update(ctx context.Context, lease *coordv1.Lease, opts metav1.UpdateOptions) (*coordv1.Lease, error) {
	if l.cut.Load() {
		return nil, errE2ECut
	}
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// e2eReconcile is one reconcile a replica did while its leadership context was live.
type e2eReconcile struct{ replica, key, value string }

// e2eLeaders records which replica leads and what each reconciled, and the violations
// of "only the leader reconciles".
type e2eLeaders struct {
	mu         sync.Mutex
	leading    map[string]bool        // between entering lead and lead's context ending
	inLead     map[string]bool        // between entering and leaving lead
	started    map[string][]time.Time // when each replica entered lead
	stopped    map[string][]time.Time // when each replica left lead
	recs       []e2eReconcile
	violations []string // reconciles by a replica that did not lead, or while another led
	overlaps   []string // a replica entered lead while another had not left it
}

func newE2ELeaders() *e2eLeaders {
	return &e2eLeaders{leading: map[string]bool{}, inLead: map[string]bool{}, started: map[string][]time.Time{},
		stopped: map[string][]time.Time{}}
}

// lead wraps a replica's lead function with the bookkeeping.
func (l *e2eLeaders) lead(id string, run func(ctx context.Context)) func(ctx context.Context) {
	return func(ctx context.Context) {
		l.mu.Lock()
		for other, in := range l.inLead {
			if in {
				l.overlaps = append(l.overlaps, fmt.Sprintf("%s started leading while %s was still in its lead function", id, other))
			}
		}
		l.leading[id], l.inLead[id] = true, true
		l.started[id] = append(l.started[id], time.Now())
		l.mu.Unlock()
		stop := context.AfterFunc(ctx, func() {
			l.mu.Lock()
			l.leading[id] = false
			l.mu.Unlock()
		})
		defer func() {
			stop()
			l.mu.Lock()
			l.leading[id], l.inLead[id] = false, false
			l.stopped[id] = append(l.stopped[id], time.Now())
			l.mu.Unlock()
		}()
		run(ctx)
	}
}

// reconciled records a reconcile, and a violation if the replica did not lead or another
// one did.
func (l *e2eLeaders) reconciled(id, key, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading[id] {
		l.violations = append(l.violations, fmt.Sprintf("%s reconciled %s=%s while not leading", id, key, value))
	}
	for other, leads := range l.leading {
		if other != id && leads {
			l.violations = append(l.violations, fmt.Sprintf("%s reconciled %s=%s while %s was leading", id, key, value, other))
		}
	}
	l.recs = append(l.recs, e2eReconcile{replica: id, key: key, value: value})
}

func (l *e2eLeaders) startedAt(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.started[id]) == 0 {
		return time.Time{}, false
	}
	return l.started[id][0], true
}

func (l *e2eLeaders) stoppedAt(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.stopped[id]) == 0 {
		return time.Time{}, false
	}
	return l.stopped[id][0], true
}

// latest returns the value id last reconciled for each key.
func (l *e2eLeaders) latest(id string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for _, r := range l.recs {
		if r.replica == id {
			out[r.key] = r.value
		}
	}
	return out
}

// e2eReplica is one "process" of a leader-elected controller: a ConfigMap controller that
// always runs, and a Loop that runs only while its LeaderElection holds the Lease.
type e2eReplica struct {
	id     string
	leases *e2eCuttableLeases
	cancel context.CancelFunc
	done   chan error
}

func startE2EReplica(t *testing.T, cfg *rest.Config, ns, id string, leaders *e2eLeaders) *e2eReplica {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	configMaps := controller.New(cs.CoreV1().ConfigMaps(ns), controller.Options[*corev1.ConfigMap]{Name: "configmaps-" + id})
	loop := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			// A reconciler's writes use its context: once leadership ends, it can do
			// nothing more.
			if ctx.Err() != nil {
				return typed.Result{}, ctx.Err()
			}
			value := "<deleted>"
			if !req.Deleted {
				value = req.Object.Data["v"]
			}
			leaders.reconciled(id, req.Key, value)
			time.Sleep(5 * time.Millisecond) // some work
			return typed.Result{}, nil
		}), typed.Options{Name: "loop-" + id, Workers: 2})
	r := &e2eReplica{id: id, leases: &e2eCuttableLeases{LeasesGetter: cs.CoordinationV1()}, done: make(chan error, 1)}
	le := typed.LeaderElection{Client: r.leases, Namespace: ns, Name: "e2e-leader", Identity: id,
		LeaseDuration: e2eLeaseDuration, RenewDeadline: e2eRenewDeadline, RetryPeriod: e2eRetryPeriod}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.done <- typed.RunAll(ctx, configMaps.Run, func(ctx context.Context) error {
			return le.Run(ctx, leaders.lead(id, func(ctx context.Context) {
				if err := loop.Run(ctx); err != nil {
					t.Errorf("%s: Loop.Run: %v", id, err)
				}
			}))
		})
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the replica and waits for it; it can be called more than once.
func (r *e2eReplica) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("replica %s: %v", r.id, err)
		}
	case <-time.After(testTimeout):
		t.Errorf("replica %s did not stop within %v", r.id, testTimeout)
	}
}

// e2eUpdates is what the updater changed, and when.
type e2eUpdates struct {
	mu    sync.Mutex
	at    map[string][]time.Time // each key's update times
	final map[string]string      // each key's last value
}

// TestE2ELeaderElectionHandOver runs two replicas of a leader-elected ConfigMap
// reconciler. The first leads; it is then stopped while a goroutine keeps changing the
// ConfigMaps, and the second must take over within a lease duration and some retry
// periods, and reconcile every ConfigMap to its final value. Only the leader reconciles:
// no reconcile runs while another replica leads.
//
// graceful: the leader's context is cancelled, so it releases the Lease.
// partitioned: the leader is cut off from the Lease (renewals and the release fail) but
// keeps running: it must stop leading on its own when it cannot renew, and the other
// replica takes over only once the unreleased Lease has expired.
func TestE2ELeaderElectionHandOver(t *testing.T) {
	cp, cs := e2eControlPlane(t)
	for i, mode := range []string{"graceful", "partitioned"} {
		t.Run(mode, func(t *testing.T) {
			ns := e2eNamespace(t, cs, "leader-"+strconv.Itoa(i))
			e2eNoLeaks(t)
			ctx := context.Background()
			const n = 8
			keys := make([]string, n)
			for i := range n {
				name := fmt.Sprintf("cm-%d", i)
				keys[i] = ns + "/" + name
				if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
					Data: map[string]string{"v": "0"}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			leaders := newE2ELeaders()
			a := startE2EReplica(t, cp.AdminConfig(), ns, "a", leaders)
			e2eEventually(t, "a leads and reconciles every ConfigMap", func() (bool, string) {
				got := leaders.latest("a")
				return len(got) == n, fmt.Sprintf("a reconciled %v", got)
			})
			b := startE2EReplica(t, cp.AdminConfig(), ns, "b", leaders)

			// The updater changes every ConfigMap round after round; after the second round
			// the leader is stopped, and the updater goes on until b has led for a full round.
			updates := &e2eUpdates{at: map[string][]time.Time{}, final: map[string]string{}}
			stopLeader := make(chan struct{})
			updaterDone := make(chan error, 1)
			go func() {
				updaterDone <- func() error {
					bRounds := 0
					for round := 1; round <= 300 && bRounds < 2; round++ {
						if _, ok := leaders.startedAt("b"); ok {
							bRounds++
						}
						for i := range n {
							name := fmt.Sprintf("cm-%d", i)
							value := strconv.Itoa(round)
							patch := fmt.Sprintf(`{"data":{"v":%q}}`, value)
							if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
								return err
							}
							updates.mu.Lock()
							updates.at[ns+"/"+name] = append(updates.at[ns+"/"+name], time.Now())
							updates.final[ns+"/"+name] = value
							updates.mu.Unlock()
							time.Sleep(30 * time.Millisecond) // pacing, not an assertion
						}
						if round == 2 {
							close(stopLeader)
						}
					}
					if bRounds < 2 {
						return errors.New("b never started leading while the updater ran")
					}
					return nil
				}()
			}()

			// The updater closes stopLeader after its second round, unless it failed first.
			select {
			case <-stopLeader:
			case err := <-updaterDone:
				t.Fatalf("the updater ended before its second round: %v", err)
			case <-time.After(testTimeout):
				t.Fatalf("the updater did not finish two rounds within %v", testTimeout)
			}
			stoppedAt := time.Now()
			switch mode {
			case "graceful":
				a.stop(t)
				lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, "e2e-leader", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder == "a" {
					t.Errorf("after a stopped, the lease is still held by a: it was not released")
				}
			case "partitioned":
				a.leases.cut.Store(true)
			}

			e2eEventually(t, "b takes over", func() (bool, string) {
				_, ok := leaders.startedAt("b")
				return ok, "b has not started leading"
			})
			bStart, _ := leaders.startedAt("b")
			handOver := bStart.Sub(stoppedAt)
			t.Logf("%s hand-over: b started leading %v after a was stopped (bound %v)", mode, handOver.Round(time.Millisecond), e2eHandOverBound)
			if handOver > e2eHandOverBound {
				t.Errorf("%s hand-over took %v, want at most a lease duration and 10 retry periods (%v)", mode, handOver, e2eHandOverBound)
			}
			if mode == "partitioned" {
				aStop, ok := leaders.stoppedAt("a")
				if !ok {
					t.Errorf("a, cut off from the lease, never stopped leading")
				} else {
					t.Logf("partitioned: a stopped leading %v after it was cut off, %v before b started",
						aStop.Sub(stoppedAt).Round(time.Millisecond), bStart.Sub(aStop).Round(time.Millisecond))
				}
				// The lease was not released: b had to wait for it to expire.
				if min := e2eLeaseDuration - 3*e2eRetryPeriod; handOver < min {
					t.Errorf("partitioned hand-over took only %v: b cannot have waited for the unreleased lease to expire (at least %v)", handOver, min)
				}
			}

			if err := receive(t, updaterDone, "the updater ends once b has led for two rounds"); err != nil {
				t.Fatal(err)
			}
			updates.mu.Lock()
			final := maps.Clone(updates.final)
			var duringHandOver []string
			for key, times := range updates.at {
				if slices.ContainsFunc(times, func(at time.Time) bool { return at.After(stoppedAt) && at.Before(bStart) }) {
					duringHandOver = append(duringHandOver, key)
				}
			}
			updates.mu.Unlock()
			sort.Strings(duringHandOver)
			t.Logf("keys changed during the hand-over: %v", duringHandOver)
			e2eEventually(t, "b reconciles every ConfigMap with its final value", func() (bool, string) {
				got := leaders.latest("b")
				return cmp.Equal(final, got), "(-final +b's last reconciled values):\n" + cmp.Diff(final, got)
			})

			a.stop(t)
			b.stop(t)
			leaders.mu.Lock()
			defer leaders.mu.Unlock()
			for _, v := range leaders.violations {
				t.Error(v)
			}
			// Whether a released the Lease after its lead returned or was cut off and
			// stopped at its renew deadline, b may lead only once a has stopped.
			for _, o := range leaders.overlaps {
				t.Error(o)
			}
			count := map[string]int{}
			for _, r := range leaders.recs {
				count[r.replica]++
			}
			t.Logf("reconciles per replica: %v", count)
		})
	}
}

// TestE2ELeaderElectionReleasesTheLeaseOnlyAfterLeadReturns checks what
// LeaderElection.Run promises together with Loop.Run: a leader that is stopped lets its
// in-flight reconcile finish, and only then may another replica lead. The leader's
// reconcile here takes a few seconds to finish its work after the leader is stopped; the
// other replica must not start leading meanwhile.
func TestE2ELeaderElectionReleasesTheLeaseOnlyAfterLeadReturns(t *testing.T) {
	cp, cs := e2eControlPlane(t)
	ns := e2eNamespace(t, cs, "release")
	e2eNoLeaks(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "slow"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// work is how long a's reconcile needs to finish once started: longer than a
	// hand-over takes when the lease is released at once (at most about two retry
	// periods), short enough to keep the test quick once the bug is fixed.
	const work = 4 * time.Second
	var (
		mu                  sync.Mutex
		aStopped, bLeads    time.Time
		aLeft               time.Time
		inFlight, bStarted  = make(chan struct{}), make(chan struct{})
		bStartedWhileInWork bool
	)
	replica := func(id string) (stop func()) {
		cs := kubernetes.NewForConfigOrDie(cp.AdminConfig())
		configMaps := controller.New[*corev1.ConfigMap, *corev1.ConfigMapList](cs.CoreV1().ConfigMaps(ns))
		var once sync.Once
		loop := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
			func(context.Context, typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
				if id != "a" {
					return typed.Result{}, nil
				}
				once.Do(func() {
					close(inFlight)
					select { // the work; cut short once b leads, as the bug is then shown
					case <-bStarted:
						mu.Lock()
						bStartedWhileInWork = true
						mu.Unlock()
					case <-time.After(work):
					}
				})
				return typed.Result{}, nil
			}), typed.Options{})
		le := typed.LeaderElection{Client: cs.CoordinationV1(), Namespace: ns, Name: "e2e-release", Identity: id,
			LeaseDuration: e2eLeaseDuration, RenewDeadline: e2eRenewDeadline, RetryPeriod: e2eRetryPeriod}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- typed.RunAll(ctx, configMaps.Run, func(ctx context.Context) error {
				return le.Run(ctx, func(ctx context.Context) {
					if id == "b" {
						mu.Lock()
						bLeads = time.Now()
						mu.Unlock()
						close(bStarted)
					}
					_ = loop.Run(ctx)
					if id == "a" {
						mu.Lock()
						aLeft = time.Now()
						mu.Unlock()
					}
				})
			})
		}()
		return sync.OnceFunc(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("replica %s: %v", id, err)
				}
			case <-time.After(testTimeout):
				t.Errorf("replica %s did not stop", id)
			}
		})
	}
	stopA := replica("a")
	defer stopA()
	receive(t, inFlight, "a leads and its reconcile is in flight")
	stopB := replica("b")
	defer stopB()
	mu.Lock()
	aStopped = time.Now()
	mu.Unlock()
	stopA() // a is stopped while its reconcile is in flight; this waits for a to return
	select {
	case <-bStarted:
	case <-time.After(testTimeout):
		t.Fatal("b never started leading")
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("after a was stopped: b started leading at +%v, a's lead function returned at +%v",
		bLeads.Sub(aStopped).Round(time.Millisecond), aLeft.Sub(aStopped).Round(time.Millisecond))
	if bStartedWhileInWork || bLeads.Before(aLeft) {
		t.Errorf("b started leading %v after a was stopped, while a's reconcile was still in flight "+
			"(it needed %v): LeaderElection.Run released the lease before lead returned", bLeads.Sub(aStopped).Round(time.Millisecond), work)
	}
}

// TestE2ELoopStartsNoReconcileAfterItsContextEnds checks Loop.Run's promise that when
// ctx ends it "stops taking new keys, lets in-flight reconciles finish": keys still
// waiting in the queue must not be reconciled (with a cancelled context) after ctx ends.
func TestE2ELoopStartsNoReconcileAfterItsContextEnds(t *testing.T) {
	_, cs := e2eControlPlane(t)
	ns := e2eNamespace(t, cs, "drain")
	e2eNoLeaks(t)
	for i := range 5 {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	configMaps := controller.New[*corev1.ConfigMap, *corev1.ConfigMapList](cs.CoreV1().ConfigMaps(ns))
	e2eRun(t, configMaps.Run)
	var (
		mu          sync.Mutex
		first       = true
		inFlight    = make(chan struct{})
		afterCancel []string
	)
	loop := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			mu.Lock()
			isFirst := first
			first = false
			if !isFirst && ctx.Err() != nil {
				afterCancel = append(afterCancel, req.Key)
			}
			mu.Unlock()
			if isFirst {
				close(inFlight)
				<-ctx.Done() // in flight when the loop is stopped
			}
			return typed.Result{}, ctx.Err()
		}), typed.Options{Workers: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	receive(t, inFlight, "the first key's reconcile starts") // one key in flight, four waiting
	cancel()
	if err := receive(t, done, "Loop.Run returns once its context ends"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(afterCancel) > 0 {
		t.Errorf("after its context ended, the loop started reconciling %d more keys, with a cancelled context: %v",
			len(afterCancel), afterCancel)
	}
}

// ---------------------------------------------------------------------------------
// Sources.

// Gadget is a CRD's Go type written by hand for the end-to-end tests.
type Gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GadgetSpec `json:"spec"`
}

type GadgetSpec struct {
	Size  int    `json:"size"`
	Color string `json:"color,omitempty"`
}

func (g *Gadget) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

var (
	e2eCRDs    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	e2eGadgets = schema.GroupVersionResource{Group: "e2e.typedinformer.dev", Version: "v1", Resource: "gadgets"}
)

// e2eInstallGadgetCRD installs the Gadget CRD as unstructured and waits until it is
// established and served.
func e2eInstallGadgetCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": e2eGadgets.Resource + "." + e2eGadgets.Group},
		"spec": map[string]any{
			"group": e2eGadgets.Group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{"spec": map[string]any{
						"type": "object",
						"properties": map[string]any{
							"size":  map[string]any{"type": "integer"},
							"color": map[string]any{"type": "string"},
						},
					}},
				}},
			}},
		},
	}}
	if _, err := dyn.Resource(e2eCRDs).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the CRD: %v", err)
	}
	e2eEventually(t, "the Gadget CRD is established", func() (bool, string) {
		got, err := dyn.Resource(e2eCRDs).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conditions {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %v", conditions)
	})
	// Established can precede the first successful request by a moment.
	e2eEventually(t, "gadgets are served", func() (bool, string) {
		_, err := dyn.Resource(e2eGadgets).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

func e2eGadget(ns, name string, size int64, color string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": e2eGadgets.GroupVersion().String(), "kind": "Gadget",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec":     map[string]any{"size": size, "color": color},
	}}
}

func e2ePodSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}
}

func e2ePod(name string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}, Spec: e2ePodSpec()}
}

// TestE2ESources watches the real server through each kind of source — generated typed
// clients (Pods, ConfigMaps, Deployments) scoped to a namespace and narrowed by label and
// field selectors, the metadata client, and a CRD through the dynamic client converted to
// a hand-written Go struct — and checks that each controller's store converges to what a
// fresh list returns, before and after changes.
func TestE2ESources(t *testing.T) {
	cp, cs := e2eControlPlane(t)
	ctx := context.Background()

	t.Run("pods by namespace and label", func(t *testing.T) {
		ns := e2eNamespace(t, cs, "pods")
		other := e2eNamespace(t, cs, "pods-other")
		pods := cs.CoreV1().Pods(ns)
		web, db := map[string]string{"app": "web"}, map[string]string{"app": "db"}
		for _, p := range []*corev1.Pod{e2ePod("web-1", web), e2ePod("web-2", web), e2ePod("db-1", db)} {
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cs.CoreV1().Pods(other).Create(ctx, e2ePod("web-elsewhere", web), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e2eNoLeaks(t)
		selector := labels.SelectorFromSet(web)
		c := controller.New(pods, controller.Options[*corev1.Pod]{ListOptions: typed.Selectors(selector, nil)})
		e2eRun(t, c.Run)
		fresh := func() ([]*corev1.Pod, error) {
			l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
			if err != nil {
				return nil, err
			}
			return e2eItems(l.Items), nil
		}
		describe := func(p *corev1.Pod) string {
			return p.ResourceVersion + " " + p.Labels["app"] + " " + string(p.Status.Phase)
		}
		e2eConverges(t, "initial", c, fresh, describe)
		if diff := cmp.Diff([]string{ns + "/web-1", ns + "/web-2"}, c.Store().Keys()); diff != "" {
			t.Errorf("cached keys (-want +got):\n%s", diff)
		}

		// A pod that leaves the selector is deleted from the store, one that joins it added.
		if _, err := pods.Patch(ctx, "web-2", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"db"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Patch(ctx, "db-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"web"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Create(ctx, e2ePod("web-3", web), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := pods.Delete(ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		e2eConverges(t, "after relabelling, adding and deleting", c, fresh, describe)
		if diff := cmp.Diff([]string{ns + "/db-1", ns + "/web-3"}, c.Store().Keys()); diff != "" {
			t.Errorf("cached keys (-want +got):\n%s", diff)
		}
		for _, p := range c.Store().List() {
			if p.Status.Phase != corev1.PodPending {
				t.Errorf("pod %s phase %q, want Pending (no kubelet runs)", p.Name, p.Status.Phase)
			}
		}
	})

	t.Run("configmaps by field selector", func(t *testing.T) {
		ns := e2eNamespace(t, cs, "fields")
		cms := cs.CoreV1().ConfigMaps(ns)
		for _, name := range []string{"target", "bystander"} {
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "1"}},
				metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		e2eNoLeaks(t)
		selector := fields.OneTermEqualSelector("metadata.name", "target")
		c := controller.New(cms, controller.Options[*corev1.ConfigMap]{ListOptions: typed.Selectors(nil, selector)})
		e2eRun(t, c.Run)
		fresh := func() ([]*corev1.ConfigMap, error) {
			l, err := cms.List(ctx, metav1.ListOptions{FieldSelector: selector.String()})
			if err != nil {
				return nil, err
			}
			return e2eItems(l.Items), nil
		}
		describe := func(c *corev1.ConfigMap) string { return c.ResourceVersion + " " + c.Data["v"] }
		e2eConverges(t, "initial", c, fresh, describe)
		for _, name := range []string{"target", "bystander"} {
			if _, err := cms.Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		e2eConverges(t, "after an update", c, fresh, describe)
		if diff := cmp.Diff([]string{ns + "/target"}, c.Store().Keys()); diff != "" {
			t.Errorf("cached keys (-want +got):\n%s", diff)
		}
		// Deleted and recreated: the store follows.
		if err := cms.Delete(ctx, "target", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e2eEventually(t, "the deletion reaches the store", func() (bool, string) {
			return c.Store().Len() == 0, fmt.Sprint(c.Store().Keys())
		})
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "target"}, Data: map[string]string{"v": "3"}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e2eConverges(t, "after recreation", c, fresh, describe)
	})

	t.Run("deployments by label", func(t *testing.T) {
		ns := e2eNamespace(t, cs, "deployments")
		deployments := cs.AppsV1().Deployments(ns)
		deployment := func(name, tier string) *appsv1.Deployment {
			lbls := map[string]string{"app": name, "tier": tier}
			return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}, Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbls}, Spec: e2ePodSpec()},
			}}
		}
		for _, d := range []*appsv1.Deployment{deployment("front", "web"), deployment("back", "api"), deployment("edge", "web")} {
			if _, err := deployments.Create(ctx, d, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		e2eNoLeaks(t)
		selector, err := labels.Parse("tier in (web)")
		if err != nil {
			t.Fatal(err)
		}
		c := controller.New(deployments, controller.Options[*appsv1.Deployment]{ListOptions: typed.Selectors(selector, nil)})
		e2eRun(t, c.Run)
		fresh := func() ([]*appsv1.Deployment, error) {
			l, err := deployments.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
			if err != nil {
				return nil, err
			}
			return e2eItems(l.Items), nil
		}
		describe := func(d *appsv1.Deployment) string {
			return fmt.Sprintf("%s replicas=%d", d.ResourceVersion, ptr.Deref(d.Spec.Replicas, -1))
		}
		e2eConverges(t, "initial", c, fresh, describe)
		if _, err := deployments.Patch(ctx, "front", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := deployments.Delete(ctx, "edge", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e2eConverges(t, "after scaling one and deleting another", c, fresh, describe)
		if d, ok := c.Store().GetByName(ns, "front"); !ok || ptr.Deref(d.Spec.Replicas, 0) != 3 {
			t.Errorf("cached front = %v, want 3 replicas", d)
		}
	})

	t.Run("metadata only", func(t *testing.T) {
		ns := e2eNamespace(t, cs, "metadata")
		secrets := cs.CoreV1().Secrets(ns)
		for i, team := range []string{"red", "blue", "red"} {
			if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i),
				Labels: map[string]string{"team": team}}, Data: map[string][]byte{"password": []byte("hunter2")}},
				metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		e2eNoLeaks(t)
		meta := metadata.NewForConfigOrDie(cp.AdminConfig()).Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(ns)
		selector := labels.SelectorFromSet(labels.Set{"team": "red"})
		c := controller.New(meta, controller.Options[*metav1.PartialObjectMetadata]{ListOptions: typed.Selectors(selector, nil)})
		e2eRun(t, c.Run)
		fresh := func() ([]*metav1.PartialObjectMetadata, error) {
			l, err := meta.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
			if err != nil {
				return nil, err
			}
			return e2eItems(l.Items), nil
		}
		describe := func(m *metav1.PartialObjectMetadata) string {
			return fmt.Sprintf("%s %v %v", m.ResourceVersion, m.Labels, m.Annotations)
		}
		e2eConverges(t, "initial", c, fresh, describe)
		if _, err := secrets.Patch(ctx, "s-0", types.MergePatchType, []byte(`{"metadata":{"annotations":{"rotated":"yes"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := secrets.Patch(ctx, "s-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"red"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e2eConverges(t, "after annotating one and relabelling another", c, fresh, describe)
		if m, ok := c.Store().GetByName(ns, "s-0"); !ok || m.Annotations["rotated"] != "yes" {
			t.Errorf("cached s-0 = %v, want the new annotation", m)
		}
		if diff := cmp.Diff([]string{ns + "/s-0", ns + "/s-1", ns + "/s-2"}, c.Store().Keys()); diff != "" {
			t.Errorf("cached keys (-want +got):\n%s", diff)
		}
	})

	t.Run("CRD as the user's own struct", func(t *testing.T) {
		dyn := dynamic.NewForConfigOrDie(cp.AdminConfig())
		e2eInstallGadgetCRD(t, dyn)
		ns := e2eNamespace(t, cs, "gadgets")
		gadgets := dyn.Resource(e2eGadgets).Namespace(ns)
		for i, color := range []string{"red", "green", "blue"} {
			if _, err := gadgets.Create(ctx, e2eGadget(ns, color, int64(i+1), color), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		e2eNoLeaks(t)
		c := controller.New(typed.FromDynamic[*Gadget](gadgets), controller.Options[*Gadget]{
			OnError: func(_ context.Context, err error) {
				if errors.Is(err, reflect.ErrIncompleteList) || errors.Is(err, reflect.ErrUnexpectedObject) {
					t.Errorf("conversion: %v", err)
				}
			},
		})
		e2eRun(t, c.Run)
		fresh := func() ([]*Gadget, error) {
			l, err := typed.FromDynamic[*Gadget](gadgets).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		}
		describe := func(g *Gadget) string {
			return fmt.Sprintf("%s %s %s size=%d color=%s", g.ResourceVersion, g.APIVersion, g.Kind, g.Spec.Size, g.Spec.Color)
		}
		e2eConverges(t, "initial", c, fresh, describe)
		if _, err := gadgets.Patch(ctx, "green", types.MergePatchType, []byte(`{"spec":{"size":42}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := gadgets.Delete(ctx, "blue", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := gadgets.Create(ctx, e2eGadget(ns, "violet", 7, "violet"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e2eConverges(t, "after an update, a deletion and a creation", c, fresh, describe)
		g, ok := c.Store().GetByName(ns, "green")
		if !ok || g.Spec.Size != 42 || g.Spec.Color != "green" {
			t.Errorf("cached green = %+v, want size 42 and color green", g)
		} else if g.Kind != "Gadget" || g.APIVersion != e2eGadgets.GroupVersion().String() {
			t.Errorf("cached green has type meta %v, want Gadget %s", g.TypeMeta, e2eGadgets.GroupVersion())
		}
	})
}

// TestE2EDynamicWatchStopEndsItsGoroutine stops a typed.Dynamic watch while an event is
// on its way and nobody reads it any more, which is what the reflector does when its
// context ends or when it gives up on a watch to relist: Stop must end the watch's
// goroutine.
func TestE2EDynamicWatchStopEndsItsGoroutine(t *testing.T) {
	cp, cs := e2eControlPlane(t)
	ns := e2eNamespace(t, cs, "dynamic-watch")
	// The explicit check below reports a leak first, with the goroutine's stack.
	e2eNoLeaks(t)
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(cp.AdminConfig())
	// Any Go struct with JSON tags will do as the target; a ConfigMap needs no CRD.
	src := typed.FromDynamic[*corev1.ConfigMap](dyn.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns))
	listed, err := src.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := src.Watch(ctx, metav1.ListOptions{ResourceVersion: listed.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unread"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The goroutines the watch started: any package typed starts, or watch.Filter's.
	watchGoroutines := []string{"k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop(", "created by github.com/typedinformer/typedinformer/typed."}
	e2eEventually(t, "the watch's goroutine holds the event, waiting for a reader", func() (bool, string) {
		return len(e2eGoroutines(watchGoroutines, "chan send", "select")) > 0, "no goroutine of the watch is sending"
	})
	w.Stop() // the reader is gone
	var left []string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		left = e2eGoroutines(watchGoroutines)
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("10s after Stop, the goroutine of the stopped watch is still blocked with the unread event: "+
			"Dynamic.Watch leaks a goroutine each time a watch is stopped with an event in flight:\n%s", strings.Join(left, "\n\n"))
	}
}

// ---------------------------------------------------------------------------------
// Related triggers.

// TestE2ERelatedPodsReconcileTheirReplicaSet reconciles ReplicaSets, with the Pods they
// own (by owner reference; there is no controller manager, so the test creates them)
// mapped to them by typed.OwnerKeys. Changing, deleting or re-owning a Pod reconciles
// the ReplicaSets concerned, which then see the Pods' new state.
func TestE2ERelatedPodsReconcileTheirReplicaSet(t *testing.T) {
	_, cs := e2eControlPlane(t)
	ns := e2eNamespace(t, cs, "related")
	ctx := context.Background()
	replicaSets, pods := cs.AppsV1().ReplicaSets(ns), cs.CoreV1().Pods(ns)
	owners := map[string]*appsv1.ReplicaSet{}
	for _, name := range []string{"web", "api"} {
		lbls := map[string]string{"app": name}
		rs, err := replicaSets.Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbls}, Spec: e2ePodSpec()},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		owners[name] = rs
	}
	ownedBy := func(rs string) []metav1.OwnerReference {
		return []metav1.OwnerReference{*metav1.NewControllerRef(owners[rs], appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}
	}
	for _, p := range []struct{ name, owner string }{{"web-1", "web"}, {"web-2", "web"}, {"api-1", "api"}, {"orphan", ""}} {
		pod := e2ePod(p.name, map[string]string{"rev": "1"})
		if p.owner != "" {
			pod.OwnerReferences = ownedBy(p.owner)
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e2eNoLeaks(t)

	rsCtl := controller.New[*appsv1.ReplicaSet, *appsv1.ReplicaSetList](replicaSets)
	podCtl := controller.New[*corev1.Pod, *corev1.PodList](pods)
	keysOf := typed.OwnerKeys[*corev1.Pod](schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, meta.RESTScopeNamespace)
	var (
		mu   sync.Mutex
		seen []string // "key: pods it saw"
	)
	loop := typed.NewLoop(rsCtl, typed.ReconcilerFunc[*appsv1.ReplicaSet](
		func(_ context.Context, req typed.Request[*appsv1.ReplicaSet]) (typed.Result, error) {
			var owned []string
			for _, p := range podCtl.Store().InNamespace(req.Namespace) {
				if slices.Contains(keysOf(p), req.Key) {
					owned = append(owned, p.Name+"@rev"+p.Labels["rev"])
				}
			}
			sort.Strings(owned)
			mu.Lock()
			seen = append(seen, req.Key+": "+strings.Join(owned, ","))
			mu.Unlock()
			return typed.Result{}, nil
		}), typed.Options{Workers: 2})
	typed.Related(loop, podCtl, keysOf)
	e2eRun(t, rsCtl.Run, podCtl.Run, loop.Run)

	// expect waits for a reconcile, after the mark, in which each key saw exactly the pods
	// given.
	mark := 0
	expect := func(step string, want ...string) {
		t.Helper()
		e2eEventually(t, step, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			for _, w := range want {
				if !slices.Contains(seen[mark:], w) {
					return false, fmt.Sprintf("no reconcile %q among %q", w, seen[mark:])
				}
			}
			return true, ""
		})
		mu.Lock()
		mark = len(seen)
		mu.Unlock()
	}
	expect("initial reconcile of every ReplicaSet with its pods",
		ns+"/web: web-1@rev1,web-2@rev1", ns+"/api: api-1@rev1")

	if _, err := pods.Patch(ctx, "web-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"rev":"2"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("updating a pod reconciles its ReplicaSet", ns+"/web: web-1@rev2,web-2@rev1")

	if err := pods.Delete(ctx, "web-2", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	expect("deleting a pod reconciles its ReplicaSet", ns+"/web: web-1@rev2")

	// Moving a pod to another owner reconciles both: the new one from the pod's new state,
	// the old one from its prior state.
	patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web","uid":%q,"controller":true,"blockOwnerDeletion":true}]}}`,
		owners["web"].UID)
	if _, err := pods.Patch(ctx, "api-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("re-owning a pod reconciles its old and new ReplicaSets", ns+"/web: api-1@rev1,web-1@rev2", ns+"/api: ")

	// A pod with no owner reconciles nothing.
	if _, err := pods.Patch(ctx, "orphan", types.MergePatchType, []byte(`{"metadata":{"labels":{"rev":"2"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Patch(ctx, "web-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"rev":"3"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// web-1's change comes after the orphan's on the same watch, so once it is reconciled
	// the orphan's event has been handled too.
	expect("a later change", ns+"/web: api-1@rev1,web-1@rev3")
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen[mark:] {
		if strings.HasPrefix(s, ns+"/api") {
			t.Errorf("changing an orphan pod or a web pod reconciled api: %q", s)
		}
	}
}

// ---------------------------------------------------------------------------------
// Transform.

// TestE2EStripManagedFieldsTransform runs two controllers over the same ConfigMaps, one
// with typed.StripManagedFields as its transform: the server sets managedFields on every
// object (and server-side apply adds entries), the plain cache keeps them, the other
// caches the same objects without them.
func TestE2EStripManagedFieldsTransform(t *testing.T) {
	_, cs := e2eControlPlane(t)
	ns := e2eNamespace(t, cs, "transform")
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps(ns)
	for _, name := range []string{"one", "two"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "1"}},
			metav1.CreateOptions{FieldManager: "e2e-create"}); err != nil {
			t.Fatal(err)
		}
	}
	e2eNoLeaks(t)
	plain := controller.New[*corev1.ConfigMap, *corev1.ConfigMapList](cms)
	stripped := controller.New(cms, controller.Options[*corev1.ConfigMap]{Transform: typed.StripManagedFields[*corev1.ConfigMap]})
	e2eRun(t, plain.Run, stripped.Run)

	check := func(step string, managers int) {
		t.Helper()
		fresh := func() ([]*corev1.ConfigMap, error) {
			l, err := cms.List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return e2eItems(l.Items), nil
		}
		describe := func(c *corev1.ConfigMap) string { return c.ResourceVersion + " " + c.Data["v"] + " " + c.Data["w"] }
		e2eConverges(t, step+" (plain)", plain, fresh, describe)
		e2eConverges(t, step+" (stripped)", stripped, fresh, describe)
		listed, err := fresh()
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range listed {
			if len(obj.ManagedFields) != managers {
				t.Errorf("%s: the server returned %s with %d managedFields entries, want %d", step, obj.Name, len(obj.ManagedFields), managers)
			}
			key := ns + "/" + obj.Name
			if p, _ := plain.Store().Get(key); len(p.ManagedFields) != len(obj.ManagedFields) {
				t.Errorf("%s: plain cache has %s with %d managedFields entries, want %d", step, key, len(p.ManagedFields), len(obj.ManagedFields))
			}
			s, _ := stripped.Store().Get(key)
			if s.ManagedFields != nil {
				t.Errorf("%s: stripped cache has %s with managedFields %v, want none", step, key, s.ManagedFields)
			}
			if s.Data["v"] != obj.Data["v"] || s.Name != obj.Name || s.UID != obj.UID {
				t.Errorf("%s: stripped cache has %s = %v, want everything but managedFields of %v", step, key, s, obj)
			}
		}
	}
	check("created", 1)

	// Changes arrive through the watch, and are stripped too. Server-side apply by a
	// second manager adds a managedFields entry.
	apply := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s"},"data":{"w":"applied"}}`
	for _, name := range []string{"one", "two"} {
		if _, err := cms.Patch(ctx, name, types.ApplyPatchType, []byte(fmt.Sprintf(apply, name)),
			metav1.PatchOptions{FieldManager: "e2e-apply", Force: ptr.To(true)}); err != nil {
			t.Fatal(err)
		}
	}
	check("applied", 2)
}
