package manager_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// rejectRenewals makes server reject, while cut is set, the Lease writes that name holder:
// its renewals and acquisitions, not its release.
func rejectRenewals(server *kubefake.Clientset, cut *atomic.Bool, holder string) {
	reject := func(action k8stesting.Action) (bool, runtime.Object, error) {
		var lease *coordinationv1.Lease
		switch a := action.(type) {
		case k8stesting.UpdateAction:
			lease = a.GetObject().(*coordinationv1.Lease)
		case k8stesting.CreateAction:
			lease = a.GetObject().(*coordinationv1.Lease)
		}
		if cut.Load() && ptr.Deref(lease.Spec.HolderIdentity, "") == holder {
			return true, nil, apierrors.NewServiceUnavailable("lease write rejected")
		}
		return false, nil, nil
	}
	server.PrependReactor("update", "leases", reject)
	server.PrependReactor("create", "leases", reject)
}

// election is a LeaderElection fast enough for tests: a leader cut off gives up after
// about RetryPeriod+RenewDeadline, 2s before its Lease expires.
func election(id string, server *kubefake.Clientset) *leaderelection.Config {
	return &leaderelection.Config{Client: server.CoordinationV1(), Namespace: "default", Name: "manager-test", Identity: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}
}

// terms records the terms of leadership of replicas, as a leader runnable of each sees
// them, and each time two overlapped.
type terms struct {
	mu       sync.Mutex
	leading  map[string]bool
	overlaps []string
	events   chan string // "<replica> starts" and "<replica> stops"
}

func newTerms() *terms { return &terms{leading: map[string]bool{}, events: make(chan string, 100)} }

func (ts *terms) runnable(id string) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		ts.mu.Lock()
		for other, leads := range ts.leading {
			if leads {
				ts.overlaps = append(ts.overlaps, fmt.Sprintf("%s started leading while %s led", id, other))
			}
		}
		ts.leading[id] = true
		ts.mu.Unlock()
		ts.events <- id + " starts"
		<-ctx.Done()
		ts.mu.Lock()
		ts.leading[id] = false
		ts.mu.Unlock()
		ts.events <- id + " stops"
		return nil
	})
}

// replica is one Manager with a shared cache, a Loop, a term recorder and a runnable on
// every replica.
type replica struct {
	m          *manager.Manager
	cache      *manager.Cache[cm]
	reconciled *reconciles
	everywhere chan struct{} // closed when the runnable on every replica runs
}

func newReplica(t *testing.T, id string, server *kubefake.Clientset, f *cmFake, ts *terms) *replica {
	t.Helper()
	r := &replica{
		m:          manager.New(manager.Options{LeaderElection: election(id, server)}),
		reconciled: newReconciles(),
		everywhere: make(chan struct{}),
	}
	r.cache = acquire(t, r.m, source(f))
	t.Cleanup(func() { r.cache.Release() })
	if _, err := manager.NewLoop(r.cache, typed.ReconcilerFunc[cm](r.reconciled.reconcile), typed.Options{Name: id}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	for name, runnable := range map[string]manager.Runnable{
		"term": ts.runnable(id),
		"everywhere": manager.EveryReplica(manager.RunnableFunc(func(ctx context.Context) error {
			once.Do(func() { close(r.everywhere) })
			<-ctx.Done()
			return nil
		})),
	} {
		if err := r.m.Add(name, runnable); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (r *replica) receiveReconciles(t *testing.T, n int) []string {
	t.Helper()
	for range n {
		receive(t, r.reconciled.ch, "a reconcile")
	}
	return r.reconciled.all()
}

// Loops run only on the replica that holds the Lease; a standby runs its caches and its
// runnables on every replica, is ready, and takes over, warm, when the leader stops.
func TestLoopsRunOnlyOnTheLeaderWhileStandbysStayWarm(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil), configMap("a", "two", nil))
	server := leasefake.NewServer()
	ts := newTerms()
	a := newReplica(t, "a", server, f, ts)
	b := newReplica(t, "b", server, f, ts)

	runA := start(t, a.m)
	if got := receive(t, ts.events, "a leads"); got != "a starts" {
		t.Fatalf("%s, want a to lead: it is the only replica", got)
	}
	a.receiveReconciles(t, 2)
	start(t, b.m)
	receive(t, b.everywhere, "b runs its runnables on every replica")
	if err := b.cache.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if p := get(b.m.ReadyzHandler(), "/readyz"); p.Code != http.StatusOK {
		t.Errorf("the standby's /readyz = %+v, want 200: its caches have synced", p)
	}
	if got := b.reconciled.all(); len(got) != 0 {
		t.Errorf("the standby reconciled %q while a led", got)
	}

	if err := runA.stop(t); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 2 {
		order = append(order, receive(t, ts.events, "a stops, b leads"))
	}
	b.receiveReconciles(t, 2)
	got := map[string][]string{"a": a.reconciled.all(), "b": b.reconciled.all(), "terms": order}
	want := map[string][]string{"a": {"a/one", "a/two"}, "b": {"a/one", "a/two"}, "terms": {"a stops", "b starts"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reconciles and terms (-want +got):\n%s", diff)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, o := range ts.overlaps {
		t.Error(o)
	}
}

// A replica whose Lease renewals fail stops its loops, and only them: its caches stay
// warm, it stays ready, Run goes on, and it leads again once it can renew.
func TestLosingLeadershipStopsLoopsKeepsCachesAndLeadsAgain(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil), configMap("a", "two", nil))
	server := leasefake.NewServer()
	var cut atomic.Bool
	rejectRenewals(server, &cut, "a")
	ts := newTerms()
	a := newReplica(t, "a", server, f, ts)
	r := start(t, a.m)
	receive(t, ts.events, "a leads")
	a.receiveReconciles(t, 2)

	cut.Store(true)
	if got := receive(t, ts.events, "a stops leading once it cannot renew"); got != "a stops" {
		t.Fatalf("%s, want a to stop leading", got)
	}
	// The Lease is released only once every leader runnable has returned: from then on
	// nothing may reconcile until a leads again.
	eventually(t, "a releases the Lease", func() bool {
		lease, err := server.CoordinationV1().Leases("default").Get(context.Background(), "manager-test", metav1.GetOptions{})
		return err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") == ""
	})
	_ = must(f.Create(configMap("a", "three", nil)))
	eventually(t, "the cache, still running, gets a/three", func() bool { _, ok := a.cache.Get("a/three"); return ok })
	if p := get(a.m.ReadyzHandler(), "/readyz"); p.Code != http.StatusOK {
		t.Errorf("/readyz without leadership = %+v, want 200: the caches are warm", p)
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v on losing leadership; it should campaign again", err)
	case key := <-a.reconciled.ch:
		t.Fatalf("reconciled %s without leadership", key)
	default:
	}

	cut.Store(false)
	if got := receive(t, ts.events, "a leads again"); got != "a starts" {
		t.Fatalf("%s, want a to lead again", got)
	}
	if diff := cmp.Diff([]string{"a/one", "a/one", "a/three", "a/two", "a/two"}, a.receiveReconciles(t, 3)); diff != "" {
		t.Errorf("reconciles over both terms (-want +got):\n%s", diff)
	}
}

// depthMetrics sends each queue depth the Loop reports.
type depthMetrics chan int

func (d depthMetrics) QueueDepth(_ string, n int) {
	select {
	case d <- n:
	default:
	}
}
func (depthMetrics) Retry(string)                           {}
func (depthMetrics) ReconcileLatency(string, time.Duration) {}
func (depthMetrics) ReconcileError(string, bool)            {}

// TestALeaderStoppingReconcilesItsQueuedDeletionsBeforeReleasingTheLease checks DESIGN 15
// across a change of leader: the next leader's cache no longer shows an object deleted
// while this one led, so the deletion this one queued must be reconciled by it, while it
// still holds the Lease.
func TestALeaderStoppingReconcilesItsQueuedDeletionsBeforeReleasingTheLease(t *testing.T) {
	f := fake.New[cm, cmList](configMap("ns", "a", nil), configMap("ns", "b", nil))
	server := leasefake.NewServer()
	m := manager.New(manager.Options{LeaderElection: election("a", server)})
	c := acquire(t, m, source(f))
	var mu sync.Mutex
	var got []string
	var initial atomic.Int32
	var stopping atomic.Bool
	blocked := make(chan struct{})
	depth := make(depthMetrics, 100)
	_, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](func(ctx context.Context, req typed.Request[cm]) (typed.Result, error) {
		if req.Key == "ns/a" && req.Object != nil && req.Object.Labels["v"] == "2" {
			close(blocked)
			<-ctx.Done() // in flight until the leader stops
		}
		if stopping.Load() {
			l, err := server.CoordinationV1().Leases("default").Get(context.Background(), "manager-test", metav1.GetOptions{})
			holder := ""
			if err == nil {
				holder = ptr.Deref(l.Spec.HolderIdentity, "")
			}
			mu.Lock()
			got = append(got, fmt.Sprintf("%s deleted=%t last=%t, lease held by %q", req.Key, req.Deleted, req.LastKnown != nil, holder))
			mu.Unlock()
		}
		initial.Add(1)
		return typed.Result{}, nil
	}), typed.Options{Metrics: depth})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, m)
	eventually(t, "both objects reconciled", func() bool { return initial.Load() == 2 })
	if _, err := f.Update(configMap("ns", "a", map[string]string{"v": "2"})); err != nil {
		t.Fatal(err)
	}
	receive(t, blocked, "a's update in flight")
	for len(depth) > 0 {
		<-depth
	}
	if _, err := f.Delete("ns", "b"); err != nil {
		t.Fatal(err)
	}
	for n := range depth { // b's deletion queued behind a's update
		if n == 1 {
			break
		}
	}
	stopping.Store(true)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{`ns/a deleted=false last=false, lease held by "a"`, `ns/b deleted=true last=true, lease held by "a"`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reconciles once the leader stopped (-want +got):\n%s", diff)
	}
}
