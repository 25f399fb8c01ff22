package controller_test

import (
	"context"
	"maps"
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

// countingMetrics records what the controller reports, and the names it is reported under.
type countingMetrics struct {
	mu       sync.Mutex
	names    map[string]bool
	lists    int
	items    int
	events   map[watch.EventType]int
	rv       string
	maxDepth int
	handled  map[string]int
	panics   map[string]int
	errors   int
}

func (m *countingMetrics) Listed(name string, items int, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.named(name)
	m.lists++
	m.items += items
}

func (m *countingMetrics) WatchEvent(name string, t watch.EventType) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.named(name)
	m.events[t]++
}

func (m *countingMetrics) ResourceVersion(name, rv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.named(name)
	m.rv = rv
}

func (m *countingMetrics) ListWatchError(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.named(name)
	m.errors++
}

func (m *countingMetrics) EventQueueDepth(name string, keys int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.named(name)
	m.maxDepth = max(m.maxDepth, keys)
}

func (m *countingMetrics) HandlerLatency(name, handler string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.named(name)
	m.handled[handler]++
}

func (m *countingMetrics) HandlerPanic(name, handler string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.named(name)
	m.panics[handler]++
}

// named records name. Called with m.mu held.
func (m *countingMetrics) named(name string) {
	if m.names == nil {
		m.names = map[string]bool{}
	}
	m.names[name] = true
}

func TestMetricsReportListsEventsVersionsQueueAndHandlers(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil))
	m := &countingMetrics{events: map[watch.EventType]int{}, handled: map[string]int{}, panics: map[string]int{}}
	c := testctl.New(t, src, controller.Options[obj]{Options: reflect.Options[obj]{Name: "settings", OnError: func(context.Context, error) {}}, Metrics: m})
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
		Names                        map[string]bool // every call carries the controller's name
	}
	want := summary{Lists: 1, Items: 2, Added: 1, Deleted: 1, RV: src.ResourceVersion(), DepthSeen: true, Handled: 4, Panics: 1,
		Names: map[string]bool{"settings": true}}
	var got summary
	// The latency of an event is reported just after its handler returns.
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		m.mu.Lock()
		got = summary{m.lists, m.items, m.events[watch.Added], m.events[watch.Deleted], m.rv, m.maxDepth > 0, m.handled["h"], m.panics["h"], maps.Clone(m.names)}
		m.mu.Unlock()
		return cmp.Equal(want, got), nil
	})
	if err != nil {
		t.Errorf("metrics (-want +got):\n%s", cmp.Diff(want, got))
	}
}
