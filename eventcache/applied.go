package eventcache

import (
	"container/heap"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Watermarked is a cache that says how far it has applied its source's changes, and
// whether it holds an object: what a reconcile loop waits on so that a key is not
// reconciled from a cache older than its own last write. A controller over an
// EventQueueCollection is one; so is each namespace of a Manager's cache.
type Watermarked interface {
	// Applied and NotifyApplied are EventQueueCollection's.
	Applied() (rv uint64, ok bool)
	NotifyApplied(rv uint64, fn func()) (stop func() bool, reached bool)
	// HoldsUID reports whether the cache holds the object namespace/name with uid.
	HoldsUID(namespace, name string, uid types.UID) bool
	// Selects reports whether the cache's selectors let obj through: one that neither
	// holds nor selects a written object has nothing of the write to apply.
	Selects(obj metav1.Object) bool
}

// Bookmarker is an EventCache that can be told a watch's progress: the reflector calls
// Bookmark with the resource version of each BOOKMARK event, which says that every event
// up to it has been sent. EventQueueCollection is one; the reflector asks for it with a
// type assertion, so an EventCache of one's own need not be.
type Bookmarker interface {
	Bookmark(resourceVersion string)
}

// Bookmark records that every event up to resourceVersion has been added, so that Applied
// reaches it once those are applied, although no event of this cache carries it (a write
// to an object outside the cache's selector). It never waits for the consumer.
func (c *EventQueueCollection[T]) Bookmark(resourceVersion string) {
	c.backlog.Progress(resourceVersion)
}

// Applied returns the collection's applied watermark: every event added with a resource
// version up to rv, every object of a list replaced at a version up to rv, and every
// event before a bookmark up to rv, has been applied to the known objects (or was dropped
// by compression, which leaves them as applying it would). It is a low watermark: keys are
// applied in the order they became pending, not by version, so a newer object can be
// applied while an older event of another key waits. ok is false when waiting for it is
// pointless: once a resource version that is not a decimal integer was seen (they cannot
// be compared), and once the collection is closed.
func (c *EventQueueCollection[T]) Applied() (rv uint64, ok bool) {
	rv, ordered := c.backlog.Applied()
	return rv, ordered && !c.waiters.closed.Load()
}

// NotifyApplied calls fn once, on a goroutine of the pipeline and with nothing of it
// locked, when Applied reaches rv or stops being ok. When that is already so it calls
// nothing and returns reached true. Otherwise stop cancels the call, reporting whether it
// did; fn must not block, since it holds up the drain loop.
func (c *EventQueueCollection[T]) NotifyApplied(rv uint64, fn func()) (stop func() bool, reached bool) {
	return c.waiters.add(rv, fn, c.Applied)
}

// appliedChanged wakes the waiters whose version Applied has reached.
func (c *EventQueueCollection[T]) appliedChanged() {
	rv, ok := c.Applied()
	c.waiters.release(rv, ok)
}

// waiters are the calls NotifyApplied registered, lowest version first.
type waiters struct {
	mu     sync.Mutex
	heap   waiterHeap
	closed atomic.Bool
}

type waiter struct {
	rv    uint64
	fn    func()
	index int // in the heap; -1 once removed
}

// add registers fn for rv, unless applied already says it is reached. applied is read
// with w.mu held, so that a change released meanwhile is not missed: release takes w.mu
// after the watermark moved.
func (w *waiters) add(rv uint64, fn func(), applied func() (uint64, bool)) (func() bool, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now, ok := applied(); !ok || now >= rv {
		return nil, true
	}
	x := &waiter{rv: rv, fn: fn}
	heap.Push(&w.heap, x)
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		if x.index < 0 {
			return false
		}
		heap.Remove(&w.heap, x.index)
		return true
	}, false
}

// release calls, outside w.mu, every waiter up to rv, or every waiter when !ok.
func (w *waiters) release(rv uint64, ok bool) {
	w.mu.Lock()
	var due []*waiter
	for len(w.heap) > 0 && (!ok || w.heap[0].rv <= rv) {
		due = append(due, heap.Pop(&w.heap).(*waiter))
	}
	w.mu.Unlock()
	for _, x := range due {
		x.fn()
	}
}

// close releases every waiter, and keeps new ones from waiting.
func (w *waiters) close() {
	w.closed.Store(true)
	w.release(0, false)
}

type waiterHeap []*waiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].rv < h[j].rv }
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}
