package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

// countingMetrics records what the controller reports.
type countingMetrics struct {
	mu       sync.Mutex
	lists    int
	items    int
	events   map[watch.EventType]int
	rv       string
	maxDepth int
	handled  map[string]int
	panics   map[string]int
	errors   int
}

func (m *countingMetrics) Listed(items int, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lists++
	m.items += items
}

func (m *countingMetrics) WatchEvent(t watch.EventType) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events[t]++
}

func (m *countingMetrics) ResourceVersion(rv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rv = rv
}

func (m *countingMetrics) Error() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errors++
}

func (m *countingMetrics) QueueDepth(keys int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxDepth = max(m.maxDepth, keys)
}

func (m *countingMetrics) HandlerLatency(handler string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.handled[handler]++
}

func (m *countingMetrics) HandlerPanic(handler string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.panics[handler]++
}

func TestMetricsReportListsEventsVersionsQueueAndHandlers(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil))
	m := &countingMetrics{events: map[watch.EventType]int{}, handled: map[string]int{}, panics: map[string]int{}}
	c := testctl.New(t, src, controller.Options[obj]{Options: reflect.Options[obj]{OnError: func(context.Context, error) {}}, Metrics: m})
	h := newRecorder()
	h.hook = func(e event.Event[obj]) {
		if e.Object.Name == "c" {
			panic("c")
		}
	}
	mustAdd(t, c, "h", h)
	run(t, c)
	_ = src.WaitForWatchers(context.Background(), 1)
	// The handler has a's addition before a is deleted: an addition not yet delivered
	// and its deletion cancel out, and the handler would see neither.
	h.waitFor(t, 2)
	if _, err := src.Create(cm("ns", "c", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Delete("ns", "a"); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, 3) // a, b from the list, then the deletion of a (c panics)
	type summary struct {
		Lists, Items, Added, Deleted int
		RV                           string
		DepthSeen                    bool
		Handled, Panics              int
	}
	want := summary{Lists: 1, Items: 2, Added: 1, Deleted: 1, RV: src.ResourceVersion(), DepthSeen: true, Handled: 4, Panics: 1}
	var got summary
	// The latency of an event is reported just after its handler returns.
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		m.mu.Lock()
		got = summary{m.lists, m.items, m.events[watch.Added], m.events[watch.Deleted], m.rv, m.maxDepth > 0, m.handled["h"], m.panics["h"]}
		m.mu.Unlock()
		return cmp.Equal(want, got), nil
	})
	if err != nil {
		t.Errorf("metrics (-want +got):\n%s", cmp.Diff(want, got))
	}
}
