package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

// startupKeys is the size of the startup list the priority test reconciles behind a live
// change, as issue 13 states it.
const startupKeys = 100_000

// depthGauge keeps the Loop's newest queue depth.
type depthGauge struct{ depth atomic.Int64 }

func (g *depthGauge) QueueDepth(_ string, depth int)         { g.depth.Store(int64(depth)) }
func (g *depthGauge) Retry(string)                           {}
func (g *depthGauge) ReconcileLatency(string, time.Duration) {}
func (g *depthGauge) ReconcileError(string, bool)            {}
func (g *depthGauge) waitFor(t *testing.T, what string, depth int64) {
	waitFor(t, what, func() bool { return g.depth.Load() == depth })
}

// TestALiveChangeIsReconciledBeforeAStartupListOf100000Keys: a Loop with one worker
// starts on a namespace of 100,000 ConfigMaps on kube-apiserver; while its worker holds
// the first key of the list and the other 99,999 wait, a ConfigMap is created. Released,
// the worker reconciles the live creation next: it waits for no more than the one
// reconcile the worker was in.
func TestALiveChangeIsReconciledBeforeAStartupListOf100000Keys(t *testing.T) {
	const ns = "priority"
	_, admin := setUp(t, ns)
	createConfigMapsAtOnce(t, admin.kube, ns, startupKeys)

	c := testctl.New(t, admin.kube.CoreV1().ConfigMaps(ns), controller.Options[*corev1.ConfigMap]{})
	var mu sync.Mutex
	var order []string
	held, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	gauge := &depthGauge{}
	loop, err := typed.NewLoop(c, typed.ReconcilerFunc[*corev1.ConfigMap](func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
		mu.Lock()
		order = append(order, req.Name)
		mu.Unlock()
		first.Do(func() {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		return typed.Result{}, nil
	}), typed.Options{Workers: 1, Metrics: gauge})
	if err != nil {
		t.Fatal(err)
	}
	start(t, runAll{c.Run, loop.Run})
	receive(t, held, "the worker holds the first key of the startup list")
	gauge.waitFor(t, "every other key of the startup list queued", startupKeys-1)

	live := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "live"}}
	if _, err := admin.kube.CoreV1().ConfigMaps(ns).Create(timeout(t), live, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gauge.waitFor(t, "the live creation queued", startupKeys)
	close(release)
	waitFor(t, "the live creation reconciled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(order, "live")
	})
	mu.Lock()
	at := slices.Index(order, "live")
	mu.Unlock()
	if at != 1 {
		t.Errorf("the live creation was reconciled %d-th, want 2nd: right after the one startup key the worker held", at+1)
	}
}

// createConfigMapsAtOnce creates n ConfigMaps named cm-000000... in ns, 64 at a time.
func createConfigMapsAtOnce(t *testing.T, kube kubernetes.Interface, ns string, n int) {
	t.Helper()
	started := time.Now()
	next := make(chan int)
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%06d", i)}}
				if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			t.Errorf("creating ConfigMaps: %v", err)
			break feed
		}
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("created %d ConfigMaps in %v", n, time.Since(started).Round(time.Millisecond))
}
