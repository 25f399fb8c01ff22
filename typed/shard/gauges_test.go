package shard_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// gauges records the last value of each of a Sharder's gauges.
type gauges struct {
	mu            sync.Mutex
	held          int
	objects, keys map[int]int
}

func (g *gauges) ShardsHeld(_ string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = n
}

func (g *gauges) ShardObjects(_ string, i, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.objects[i] = n
}

func (g *gauges) ShardKeys(_ string, i, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keys[i] = n
}

func (*gauges) ShardMoved(string, int, bool)        {}
func (*gauges) HandOver(string, int, time.Duration) {}

func (g *gauges) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprintf("%d shards held, objects %v, keys queued %v", g.held, g.objects, g.keys)
}

// until waits for the gauges to read want, logging each value they pass through.
func (g *gauges) until(t *testing.T, want string) {
	t.Helper()
	last := ""
	testwait.Eventually(t, "the gauges to read "+want, func() bool {
		got := g.String()
		if got != last {
			t.Logf("gauges: %s", got)
			last = got
		}
		return got == want
	}, testwait.Timeout)
}

// The Sharder's ShardObjects and ShardKeys report, for each shard held, the objects its
// cache holds and its keys queued in the Loop, not counting the one being reconciled:
// 2 shards of 3 and 5 objects, the only worker held by one key, then every key done.
func TestShardObjectsAndShardKeysReportEachShardsObjectsAndQueuedKeys(t *testing.T) {
	space := shard.Space{Shards: 2, By: shard.ByNamespace}
	namespaces := map[int]string{} // a namespace of each shard
	for n := 0; len(namespaces) < space.Shards; n++ {
		ns := fmt.Sprintf("ns-%d", n)
		if i := space.OfHash(shard.Hash(ns)); namespaces[i] == "" {
			namespaces[i] = ns
		}
	}
	objects := map[int]int{0: 3, 1: 5}
	var objs []runtime.Object
	for i, n := range objects {
		for j := range n {
			objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[i], Name: fmt.Sprintf("cm-%d", j), UID: uuid.NewUUID()}})
		}
	}
	g := &gauges{objects: map[int]int{}, keys: map[int]int{}}
	s, err := shard.New(shard.Options{
		Client: leasefake.NewServer().CoordinationV1(), Namespace: "default", Name: "g", Identity: "a", Space: space,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond, Metrics: g,
	})
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan string, 1), make(chan struct{})
	var first atomic.Bool
	loop, err := shard.NewLoop(runManager(t), s, configMapSource(fake.NewClientset(objs...)), typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if first.CompareAndSwap(false, true) {
				held <- req.Namespace
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return typed.Result{}, nil
		}), typed.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	defer func() {
		cancel()
		if err := testwait.Recv(t, done, "Run returns"); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// The only worker holds one key: every other key of both shards is queued.
	blocked := space.OfHash(shard.Hash(testwait.Recv(t, held, "a reconcile holds the worker")))
	keys := maps.Clone(objects)
	keys[blocked]--
	g.until(t, fmt.Sprintf("2 shards held, objects %v, keys queued %v", objects, keys))

	// Released, the worker reconciles every key: none is left queued.
	close(release)
	g.until(t, fmt.Sprintf("2 shards held, objects %v, keys queued %v", objects, map[int]int{0: 0, 1: 0}))
}
