package shard_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// inShard returns a ConfigMap named name whose UID puts it in shard i of space.
func inShard(space shard.Space, i int, name string) *corev1.ConfigMap {
	for {
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uuid.NewUUID()}}
		if space.Of(obj) == i {
			return obj
		}
	}
}

// A deletion that waits for the replica's only worker, busy in another shard, when its
// shard is given up was not reconciled: it is reconciled, with its last state, before the
// shard's Lease is released, as a deletion still queued is (DESIGN 15: the next owner's
// list cannot show it).
func TestADeletionWaitingForAWorkerWhenItsShardMovesIsReconciledBeforeTheLeaseIsReleased(t *testing.T) {
	space := shard.Space{Shards: 2}
	a := inShard(space, 0, "a")
	cluster := fake.NewClientset(a, inShard(space, 1, "b"))
	s, err := shard.New(shard.Options{
		Client: leasefake.NewServer().CoordinationV1(), Namespace: "default", Name: "loops", Identity: "a", Space: space,
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
	// The depth of the replica's queue, reported once b's deletion passed the loop's
	// predicate, that is once the handler was about to queue it: the first positive one
	// then says that b waits for the replica's only worker, busy with a.
	var deletionSeen atomic.Bool
	depth := make(chan int, 100)
	sawDeletion := func(e event.Event[*corev1.ConfigMap]) bool {
		if e.Type == event.Deleted && e.Key == "default/b" {
			deletionSeen.Store(true)
		}
		return true
	}
	loop, err := shard.NewLoop(runManager(t), s, configMapSource(cluster), typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if req.Key == "default/a" && req.Object != nil && req.Object.Data["v"] == "2" {
				close(blocked)
				<-ctx.Done()
				time.Sleep(200 * time.Millisecond) // the worker stays busy past the hand-over
			}
			if stopping.Load() {
				mu.Lock()
				got = append(got, fmt.Sprintf("%s deleted=%t last=%v", req.Key, req.Deleted, req.LastKnown != nil))
				mu.Unlock()
			}
			initial.Add(1)
			return typed.Result{}, nil
		}), typed.Options{Workers: 1, Metrics: depthOnceSeen{depth, &deletionSeen}}, sawDeletion)
	if err != nil {
		t.Fatal(err)
	}
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	waitFor(t, "both objects reconciled", func() bool { return initial.Load() == 2 })
	a = a.DeepCopy()
	a.Data = map[string]string{"v": "2"}
	if _, err := cluster.CoreV1().ConfigMaps("default").Update(t.Context(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-blocked
	if err := cluster.CoreV1().ConfigMaps("default").Delete(t.Context(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for n := range depth {
		if n > 0 {
			break
		}
	}
	stopping.Store(true)
	cancel() // the replica stops: both shards move to the next owner
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(got) // the shards hand over side by side
	if diff := cmp.Diff([]string{"default/a deleted=false last=false", "default/b deleted=true last=true"}, got); diff != "" {
		t.Errorf("reconciles once the replica stopped (-want +got):\n%s", diff)
	}
}

// depthOnceSeen sends the queue depths reported once seen is true.
type depthOnceSeen struct {
	depth chan int
	seen  *atomic.Bool
}

func (m depthOnceSeen) QueueDepth(_ string, n int) {
	if m.seen.Load() {
		select {
		case m.depth <- n:
		default: // the test has read what it waited for
		}
	}
}
func (depthOnceSeen) Retry(string)                           {}
func (depthOnceSeen) ReconcileLatency(string, time.Duration) {}
func (depthOnceSeen) ReconcileError(string, bool)            {}
