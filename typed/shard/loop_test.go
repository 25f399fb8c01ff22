package shard_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// reconciles records every reconcile: which replica, which key, the object's data, when.
type reconciles struct {
	mu      sync.Mutex
	records []record
}

type record struct {
	replica, key, data string
	start, end         time.Time
}

func (r *reconciles) reconciler(replica string, block func(key string)) typed.Reconciler[*corev1.ConfigMap] {
	return typed.ReconcilerFunc[*corev1.ConfigMap](func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
		rec := record{replica: replica, key: req.Key, start: time.Now()}
		if req.Object != nil {
			rec.data = req.Object.Data["v"]
		}
		block(req.Key)
		rec.end = time.Now()
		r.mu.Lock()
		r.records = append(r.records, rec)
		r.mu.Unlock()
		return typed.Result{}, nil
	})
}

// overlaps returns the keys two replicas reconciled at once.
func (r *reconciles) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i, a := range r.records {
		for _, b := range r.records[i+1:] {
			if a.key == b.key && a.replica != b.replica && a.start.Before(b.end) && b.start.Before(a.end) {
				out = append(out, fmt.Sprintf("%s by %s and %s", a.key, a.replica, b.replica))
			}
		}
	}
	return out
}

// of returns the reconciles of key, in the order they ended.
func (r *reconciles) of(key string) []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record
	for _, rec := range r.records {
		if rec.key == key {
			out = append(out, rec)
		}
	}
	return out
}

// latest returns the last reconcile of each key that saw data.
func (r *reconciles) latest(data string) map[string]record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]record{}
	for _, rec := range r.records {
		if rec.data == data {
			out[rec.key] = rec
		}
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestShardedLoopReconcilesEachKeyOnItsOwnerAndHandsOverAfterInFlightReconciles(t *testing.T) {
	const objects, shards = 40, 8
	var cms []*corev1.ConfigMap
	for i := range objects {
		cms = append(cms, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%d", i), UID: uuid.NewUUID()}, // random, as the server makes them: FNV-1a spreads similar short strings badly
			Data:       map[string]string{"v": "1"},
		})
	}
	objs := make([]runtime.Object, len(cms))
	for i := range cms {
		objs[i] = cms[i]
	}
	cluster := fake.NewClientset(objs...)
	leases := leasefake.NewServer().CoordinationV1()
	space := shard.Space{Shards: shards}
	rec := &reconciles{}

	type replica struct {
		loop   *shard.Loop[*corev1.ConfigMap]
		cancel context.CancelFunc
		done   chan struct{}
	}
	var blockedKey atomic.Value // the key whose reconcile on "b" blocks until release closes
	blockedKey.Store("")
	release, blocking := make(chan struct{}), make(chan struct{})
	start := func(name string) *replica {
		s, err := shard.New(shard.Options{
			Client: leases, Namespace: "default", Name: "loops", Identity: name, Space: space,
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		block := func(key string) {
			if name == "b" && key == blockedKey.Load() {
				close(blocking)
				<-release
			}
		}
		r := &replica{done: make(chan struct{})}
		r.loop, err = shard.NewLoop(runManager(t), s, configMapSource(cluster), rec.reconciler(name, block), typed.Options{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		_, logCtx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(logCtx)
		r.cancel = cancel
		go func() {
			defer close(r.done)
			if err := r.loop.Run(ctx); err != nil {
				t.Errorf("%s: Run: %v", name, err)
			}
		}()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	a, b := start("a"), start("b")

	// Every key is reconciled, and the two caches split the objects between them.
	waitFor(t, "every key reconciled", func() bool { return len(rec.latest("1")) == objects })
	waitFor(t, "the caches to split the objects", func() bool {
		n := 0
		for _, c := range a.loop.Cached() {
			n += c
		}
		for _, c := range b.loop.Cached() {
			n += c
		}
		na, nb := len(a.loop.Cached()), len(b.loop.Cached())
		return n == objects && na+nb == shards && na <= 5 && nb <= 5 // Assign's cap for 8 shards and 2 members
	})

	// A reconcile in flight on b when b leaves keeps its key from a until it ends.
	var key string
	for i := range objects {
		if _, ok := b.loop.Get(fmt.Sprintf("default/cm-%d", i)); ok {
			key = fmt.Sprintf("default/cm-%d", i)
			break
		}
	}
	cm, ok := b.loop.Get(key)
	if !ok {
		t.Fatalf("b caches none of the objects: %v", b.loop.Cached())
	}
	blockedKey.Store(key)
	cm = cm.DeepCopy()
	cm.Data = map[string]string{"v": "2"}
	if _, err := cluster.CoreV1().ConfigMaps("default").Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-blocking
	b.cancel()
	time.Sleep(time.Second) // a would have taken b's shards by now, were it not for the reconcile in flight
	if got, ok := rec.latest("2")[key]; ok {
		t.Errorf("%s was reconciled by %s while b's reconcile was in flight", key, got.replica)
	}
	close(release)
	<-b.done

	// a takes over every shard; changes after the hand-over are reconciled by a.
	waitFor(t, "a to hold every shard", func() bool { return len(a.loop.Cached()) == shards })
	for i := range objects {
		cm := cms[i].DeepCopy()
		cm.Data = map[string]string{"v": "3"}
		if _, err := cluster.CoreV1().ConfigMaps("default").Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every change reconciled", func() bool { return len(rec.latest("3")) == objects })
	for key, r := range rec.latest("3") {
		if r.replica != "a" {
			t.Errorf("%s reconciled by %s after the hand-over, want a", key, r.replica)
		}
	}
	// b's in-flight reconcile ended before a, having taken the shard over, reconciled
	// the key (its cache's initial list).
	var bEnd, aStart time.Time
	for _, r := range rec.of(key) {
		switch {
		case r.replica == "b" && r.data == "2":
			bEnd = r.end
		case r.replica == "a" && r.data == "2" && aStart.IsZero():
			aStart = r.start
		}
	}
	if bEnd.IsZero() || aStart.IsZero() || aStart.Before(bEnd) {
		t.Errorf("%s: b's in-flight reconcile ended at %v, a's first reconcile started at %v", key, bEnd, aStart)
	}
	if o := rec.overlaps(); len(o) != 0 {
		t.Errorf("keys reconciled by two replicas at once: %v", o)
	}
}

// queueMetrics reports each shard's queue depth through depth.
type queueMetrics struct{ depth chan int }

func (m queueMetrics) QueueDepth(_ string, n int) {
	select {
	case m.depth <- n:
	default:
	}
}
func (queueMetrics) Retry(string)                           {}
func (queueMetrics) ReconcileLatency(string, time.Duration) {}
func (queueMetrics) ReconcileError(string, bool)            {}

// TestADeletionQueuedWhenTheShardMovesIsReconciledBeforeTheLeaseIsReleased checks DESIGN
// 15 across a hand-over: the next owner lists the shard, which no longer shows the
// deleted object, so the replica giving it up must reconcile the deletion itself.
func TestADeletionQueuedWhenTheShardMovesIsReconciledBeforeTheLeaseIsReleased(t *testing.T) {
	cluster := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: uuid.NewUUID()}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b", UID: uuid.NewUUID()}},
	)
	leases := leasefake.NewServer().CoordinationV1()
	s, err := shard.New(shard.Options{
		Client: leases, Namespace: "default", Name: "loops", Identity: "a", Space: shard.Space{Shards: 1},
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	var stopping atomic.Bool
	var initial atomic.Int32
	blocked := make(chan struct{})
	depth := make(chan int, 100)
	loop, err := shard.NewLoop(runManager(t), s, configMapSource(cluster), typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if req.Key == "default/a" && req.Object != nil && req.Object.Data["v"] == "2" {
				close(blocked)
				<-ctx.Done() // in flight until the shard is given up
			}
			if stopping.Load() {
				mu.Lock()
				got = append(got, fmt.Sprintf("%s deleted=%t last=%v", req.Key, req.Deleted, req.LastKnown != nil))
				mu.Unlock()
			}
			initial.Add(1)
			return typed.Result{}, nil
		}), typed.Options{Metrics: queueMetrics{depth}})
	if err != nil {
		t.Fatal(err)
	}
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	waitFor(t, "both objects reconciled", func() bool { return initial.Load() == 2 })
	if _, err := cluster.CoreV1().ConfigMaps("default").Update(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}, Data: map[string]string{"v": "2"},
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-blocked
	for len(depth) > 0 {
		<-depth
	}
	if err := cluster.CoreV1().ConfigMaps("default").Delete(t.Context(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for n := range depth { // b's deletion queued behind a's reconcile
		if n == 1 {
			break
		}
	}
	stopping.Store(true)
	cancel() // the replica stops: its shard moves to the next owner
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"default/a deleted=false last=false", "default/b deleted=true last=true"}, got); diff != "" {
		t.Errorf("reconciles once the replica stopped (-want +got):\n%s", diff)
	}
}
