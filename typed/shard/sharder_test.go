package shard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// cuttable is a replica's Lease client that a test can cut off from the server, as a
// crash or a partition does.
type cuttable struct {
	coordinationclient.LeasesGetter
	cut *atomic.Bool
}

var errCut = errors.New("cut off from the API server")

func (c cuttable) Leases(ns string) coordinationclient.LeaseInterface {
	return cutLeases{c.LeasesGetter.Leases(ns), c.cut}
}

type cutLeases struct {
	coordinationclient.LeaseInterface
	cut *atomic.Bool
}

func (l cutLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	if l.cut.Load() {
		return nil, errCut
	}
	return l.LeaseInterface.Get(ctx, name, opts)
}

func (l cutLeases) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	if l.cut.Load() {
		return nil, errCut
	}
	return l.LeaseInterface.List(ctx, opts)
}

func (l cutLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if l.cut.Load() {
		return nil, errCut
	}
	return l.LeaseInterface.Create(ctx, lease, opts)
}

func (l cutLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.cut.Load() {
		return nil, errCut
	}
	return l.LeaseInterface.Update(ctx, lease, opts)
}

func (l cutLeases) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if l.cut.Load() {
		return errCut
	}
	return l.LeaseInterface.Delete(ctx, name, opts)
}

// holding records, per shard, when each replica's work on it started and ended.
type holding struct {
	mu    sync.Mutex
	spans map[int][]span
}

type span struct {
	replica    string
	start, end time.Time // end is zero while the work runs
}

func (h *holding) work(replica string) func(ctx context.Context, sh shard.Shard) {
	return func(ctx context.Context, sh shard.Shard) {
		h.mu.Lock()
		h.spans[sh.Index] = append(h.spans[sh.Index], span{replica: replica, start: time.Now()})
		n := len(h.spans[sh.Index]) - 1
		h.mu.Unlock()
		<-ctx.Done()
		h.mu.Lock()
		h.spans[sh.Index][n].end = time.Now()
		h.mu.Unlock()
	}
}

// overlaps returns the shards two replicas worked on at once.
func (h *holding) overlaps() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for i, spans := range h.spans {
		for a := range spans {
			for b := a + 1; b < len(spans); b++ {
				x, y := spans[a], spans[b]
				if x.replica == y.replica {
					continue
				}
				xEnd, yEnd := x.end, y.end
				if xEnd.IsZero() {
					xEnd = time.Now()
				}
				if yEnd.IsZero() {
					yEnd = time.Now()
				}
				if x.start.Before(yEnd) && y.start.Before(xEnd) {
					out = append(out, fmt.Sprintf("shard %d: %s and %s", i, x.replica, y.replica))
				}
			}
		}
	}
	return out
}

type replica struct {
	name    string
	sharder *shard.Sharder
	cut     *atomic.Bool
	cancel  context.CancelFunc
	done    chan error
}

func startReplica(t *testing.T, server coordinationclient.LeasesGetter, name string, shards int, h *holding) *replica {
	t.Helper()
	return startInstance(t, server, name, name, shards, h)
}

// startInstance starts a replica of identity, whose work is recorded as name's.
func startInstance(t *testing.T, server coordinationclient.LeasesGetter, identity, name string, shards int, h *holding) *replica {
	t.Helper()
	r := &replica{name: name, cut: &atomic.Bool{}, done: make(chan error, 1)}
	s, err := shard.New(shard.Options{
		Client:        cuttable{server, r.cut},
		Namespace:     "default",
		Name:          "test",
		Identity:      identity,
		Space:         shard.Space{Shards: shards},
		LeaseDuration: 2 * time.Second,
		RenewDeadline: 1500 * time.Millisecond,
		RetryPeriod:   200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.sharder = s
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	r.cancel = cancel
	go func() { r.done <- s.Run(ctx, h.work(name)) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *replica) stop(t *testing.T) {
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("replica %s: Run: %v", r.name, err)
	}
	r.done <- nil // for a second stop
}

// settle waits until the running replicas hold every shard, each exactly once, none more
// than Assign's cap, and returns the shards each holds.
func settle(t *testing.T, shards int, rs ...*replica) map[string][]int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	limit := min((shards+len(rs)-1)/len(rs)+1, (3*shards+2*len(rs)-1)/(2*len(rs)))
	for {
		held := map[string][]int{}
		var all []int
		balanced := true
		for _, r := range rs {
			held[r.name] = r.sharder.Held()
			all = append(all, held[r.name]...)
			balanced = balanced && len(held[r.name]) <= limit
		}
		slices.Sort(all)
		if balanced && len(all) == shards && len(slices.Compact(slices.Clone(all))) == shards {
			return held
		}
		if time.Now().After(deadline) {
			t.Fatalf("shards never settled: %v", held)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestReplicasDivideTheShardsAndTakeOverFromALeavingOrCrashedOneWithoutOverlap(t *testing.T) {
	const shards = 16
	server := leasefake.NewServer().CoordinationV1()
	h := &holding{spans: map[int][]span{}}
	a := startReplica(t, server, "a", shards, h)
	b := startReplica(t, server, "b", shards, h)
	c := startReplica(t, server, "c", shards, h)
	settle(t, shards, a, b, c)

	// A replica that stops releases its shards; the others take them.
	c.stop(t)
	settle(t, shards, a, b)

	// A replica that crashes (cut off: no heartbeat, no renewal) gives up its shards
	// itself once it cannot renew, and the others take them once its Leases expire.
	b.cut.Store(true)
	held := settle(t, shards, a)
	if diff := cmp.Diff(map[string][]int{"a": seq(shards)}, held); diff != "" {
		t.Errorf("after b's crash (-want +got):\n%s", diff)
	}
	// A new replica gets its share, and the crashed one, still cut off, none.
	d := startReplica(t, server, "d", shards, h)
	settle(t, shards, a, d)
	if got := b.sharder.Held(); len(got) != 0 {
		t.Errorf("the crashed replica still works on shards %v", got)
	}
	if o := h.overlaps(); len(o) != 0 {
		t.Errorf("two replicas worked on one shard at once: %v", o)
	}
}

// TestAReplicaRestartedUnderItsIdentityWaitsForItsPredecessorsLeases checks a pod of a
// StatefulSet force-deleted while cut off from the API server (so still working on its
// shards until it notices), and started again under the same name: the new instance
// must not take the old one's shards as its own.
func TestAReplicaRestartedUnderItsIdentityWaitsForItsPredecessorsLeases(t *testing.T) {
	const shards = 4
	server := leasefake.NewServer().CoordinationV1()
	h := &holding{spans: map[int][]span{}}
	old := startInstance(t, server, "a", "a, first instance", shards, h)
	settle(t, shards, old)
	old.cut.Store(true)
	restarted := startInstance(t, server, "a", "a, second instance", shards, h)
	held := settle(t, shards, restarted)
	if diff := cmp.Diff(map[string][]int{"a, second instance": seq(shards)}, held); diff != "" {
		t.Errorf("the restarted instance's shards (-want +got):\n%s", diff)
	}
	if o := h.overlaps(); len(o) != 0 {
		t.Errorf("two instances worked on one shard at once: %v", o)
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestTheMemberLeaseOfAReplicaGoneForGoodIsDeleted(t *testing.T) {
	server := leasefake.NewServer().CoordinationV1()
	long := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	ghost, seconds := "ghost", int32(1)
	if _, err := server.Leases("default").Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "test-member-ghost", Labels: map[string]string{shard.GroupLabel: "test"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &ghost, LeaseDurationSeconds: &seconds, RenewTime: &long},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := &holding{spans: map[int][]span{}}
	a := startReplica(t, server, "a", 4, h)
	settle(t, 4, a)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := server.Leases("default").Get(t.Context(), "test-member-ghost", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ghost's member Lease is still there: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := server.Leases("default").Get(t.Context(), "test-member-a", metav1.GetOptions{}); err != nil || *got.Spec.HolderIdentity != "a" {
		t.Errorf("a's own member Lease: %v, %v", got, err)
	}
}

// hookedLeases calls after with each Lease it updated.
type hookedLeases struct {
	coordinationclient.LeasesGetter
	after func(*coordinationv1.Lease)
}

func (h hookedLeases) Leases(ns string) coordinationclient.LeaseInterface {
	return hookedLease{h.LeasesGetter.Leases(ns), h.after}
}

type hookedLease struct {
	coordinationclient.LeaseInterface
	after func(*coordinationv1.Lease)
}

func (h hookedLease) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	out, err := h.LeaseInterface.Update(ctx, l, opts)
	if err == nil {
		h.after(out)
	}
	return out, err
}

// TestALeaseTakenOverJustBeforeTheShardMovesIsReleased checks a replica that takes over
// the expired Lease of a shard and is told to stop at once: it must not leave the Lease
// held, which would keep the shard's next owner waiting for it to expire.
func TestALeaseTakenOverJustBeforeTheShardMovesIsReleased(t *testing.T) {
	server := leasefake.NewServer().CoordinationV1()
	dead, seconds := "dead", int32(1)
	long := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	if _, err := server.Leases("default").Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "test-shard-0", Labels: map[string]string{shard.GroupLabel: "test"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &dead, LeaseDurationSeconds: &seconds, RenewTime: &long, AcquireTime: &long},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	defer cancel()
	client := hookedLeases{server, func(l *coordinationv1.Lease) {
		if l.Name == "test-shard-0" && strings.HasPrefix(ptr.Deref(l.Spec.HolderIdentity, ""), "a_") {
			cancel() // stopped right after the take-over
		}
	}}
	s, err := shard.New(shard.Options{
		Client: client, Namespace: "default", Name: "test", Identity: "a", Space: shard.Space{Shards: 1},
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx, func(context.Context, shard.Shard) {}); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() == nil {
		t.Fatal("Run returned before the take-over")
	}
	l, err := server.Leases("default").Get(t.Context(), "test-shard-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder != "" {
		t.Errorf("the shard's Lease is held by %q after Run returned, want it released", holder)
	}
}

// TestEveryShardLeaseCarriesTheGroupLabel checks that the Sharder, which lists its Leases
// by the group's label, never campaigns on a shard's Lease without it: one created
// without it (by client-go's elector, or an older version), or one whose creation failed.
func TestEveryShardLeaseCarriesTheGroupLabel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setUp func(t *testing.T, server *fake.Clientset)
	}{
		{"a Lease created without the label", func(t *testing.T, server *fake.Clientset) {
			if _, err := server.CoordinationV1().Leases("default").Create(t.Context(), &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "test-shard-0"},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"a creation that fails once", func(t *testing.T, server *fake.Clientset) {
			var failed atomic.Bool
			server.PrependReactor("create", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).Name == "test-shard-0" && !failed.Swap(true) {
					return true, nil, apierrors.NewServiceUnavailable("etcd is busy")
				}
				return false, nil, nil
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := leasefake.NewServer()
			tc.setUp(t, server)
			h := &holding{spans: map[int][]span{}}
			a := startReplica(t, server.CoordinationV1(), "a", 2, h)
			settle(t, 2, a)
			a.stop(t)
			l, err := server.CoordinationV1().Leases("default").Get(t.Context(), "test-shard-0", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]string{shard.GroupLabel: "test"}, l.Labels); diff != "" {
				t.Errorf("the shard's Lease's labels (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWorkFinishesTheHandOverHoldingTheLease checks Shard.Held: after work's context
// ends, the shard's Lease stays held (renewed) until work returns, or until Held ends
// RenewDeadline later for work that does not return.
func TestWorkFinishesTheHandOverHoldingTheLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		// handOver is what work does once its context has ended.
		handOver      func(held context.Context)
		wantHeldEnded bool
	}{
		{"work that returns once it has handed over", func(context.Context) { time.Sleep(300 * time.Millisecond) }, false},
		{"work that waits for Held to end", func(held context.Context) { <-held.Done() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := leasefake.NewServer().CoordinationV1()
			type seen struct {
				HolderDuringHandOver  string
				HeldEndedBeforeReturn bool
			}
			var got seen
			var returned time.Time
			s, err := shard.New(shard.Options{
				Client: server, Namespace: "default", Name: "test", Identity: "a", Space: shard.Space{Shards: 1},
				LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			_, logCtx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(logCtx)
			working := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- s.Run(ctx, func(ctx context.Context, sh shard.Shard) {
					close(working)
					<-ctx.Done()
					if sh.Held().Err() != nil {
						t.Error("Held had ended when work's context did")
					}
					l, err := server.Leases("default").Get(t.Context(), "test-shard-0", metav1.GetOptions{})
					if err != nil {
						t.Error(err)
						return
					}
					got.HolderDuringHandOver = strings.SplitN(ptr.Deref(l.Spec.HolderIdentity, ""), "_", 2)[0]
					tc.handOver(sh.Held())
					got.HeldEndedBeforeReturn = sh.Held().Err() != nil
					returned = time.Now()
				})
			}()
			<-working
			// Held's RenewDeadline runs from the end of work's context, which is after
			// this instant; work sees the end later still, so time it from here.
			cancelled := time.Now()
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(seen{HolderDuringHandOver: "a", HeldEndedBeforeReturn: tc.wantHeldEnded}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.wantHeldEnded && returned.Sub(cancelled) < 1500*time.Millisecond {
				t.Errorf("Held ended %v after work's context, want RenewDeadline (1.5s)", returned.Sub(cancelled))
			}
			l, err := server.Leases("default").Get(t.Context(), "test-shard-0", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder != "" {
				t.Errorf("the shard's Lease is held by %q after Run returned, want it released", holder)
			}
		})
	}
}
