package eventcache

import (
	"sync/atomic"
	"testing"

	"github.com/typedinformer/typedinformer/event"
)

func wantApplied(t *testing.T, c *EventQueueCollection[obj], want uint64, wantOK bool) {
	t.Helper()
	if got, ok := c.Applied(); got != want || ok != wantOK {
		t.Fatalf("Applied() = %d, %v; want %d, %v", got, ok, want, wantOK)
	}
}

// A reader told that the cache has applied a version finds, in the known objects, the
// object written at that version: the list's version counts once the list is applied, a
// watch event's once it is, and a bookmark's once the events before it are.
func TestAppliedCoversTheListTheEventsAndBookmarksInTheKnownObjects(t *testing.T) {
	p := newPipeline()
	if err := p.c.Replace([]obj{cm("a", "3")}, "10", CompleteList); err != nil {
		t.Fatal(err)
	}
	wantApplied(t, p.c, 0, true)
	p.drain()
	wantApplied(t, p.c, 10, true)

	p.add(t, event.Modified, cm("a", "11"))
	p.c.Bookmark("15")
	wantApplied(t, p.c, 10, true)
	p.drain()
	wantApplied(t, p.c, 15, true)
	if got, _ := p.c.KnownObjects().Get("ns/a"); got.ResourceVersion != "11" {
		t.Fatalf("known a at %s, want 11", got.ResourceVersion)
	}
}

// NotifyApplied calls each waiter once, when the watermark reaches its version, and
// none before; a waiter already satisfied is not registered, and one stopped is never
// called.
func TestNotifyAppliedCallsEachWaiterOnceWhenItsVersionIsApplied(t *testing.T) {
	p := newPipeline()
	if err := p.c.Replace(nil, "10", CompleteList); err != nil {
		t.Fatal(err)
	}
	p.drain()
	if stop, reached := p.c.NotifyApplied(10, func() { t.Error("called for a version already applied") }); !reached || stop != nil {
		t.Fatalf("NotifyApplied(10) at 10: reached %v; want true and no stop", reached)
	}
	var at12, at20, stopped atomic.Int32
	if _, reached := p.c.NotifyApplied(12, func() { at12.Add(1) }); reached {
		t.Fatal("NotifyApplied(12) at 10 says reached")
	}
	p.c.NotifyApplied(20, func() { at20.Add(1) })
	stop, _ := p.c.NotifyApplied(12, func() { stopped.Add(1) })
	if !stop() || stop() {
		t.Fatal("stop should cancel the call once, then report it already cancelled")
	}

	p.add(t, event.Added, cm("b", "12"))
	if at12.Load() != 0 {
		t.Fatal("a waiter was called before its version was applied")
	}
	p.drain()
	if at12.Load() != 1 || at20.Load() != 0 || stopped.Load() != 0 {
		t.Fatalf("after 12 was applied: called at12 %d, at20 %d, stopped %d times; want 1, 0, 0", at12.Load(), at20.Load(), stopped.Load())
	}
	p.c.Bookmark("25")
	p.drain()
	if at12.Load() != 1 || at20.Load() != 1 {
		t.Fatalf("after the bookmark: at12 %d, at20 %d calls; want 1, 1", at12.Load(), at20.Load())
	}
}

// A cache that stops, or whose versions cannot be compared, releases its waiters rather
// than keep them waiting for good, and says Applied is no longer worth waiting for.
func TestWaitersAreReleasedWhenTheCacheClosesOrTurnsOutUnordered(t *testing.T) {
	t.Run("closed", func(t *testing.T) {
		p := newPipeline()
		var called atomic.Int32
		p.c.NotifyApplied(5, func() { called.Add(1) })
		p.c.Close()
		if called.Load() != 1 {
			t.Fatalf("waiter called %d times on Close, want 1", called.Load())
		}
		wantApplied(t, p.c, 0, false)
		if _, reached := p.c.NotifyApplied(9, func() {}); !reached {
			t.Fatal("a closed cache registered a waiter")
		}
	})
	t.Run("unordered", func(t *testing.T) {
		p := newPipeline()
		var called atomic.Int32
		p.c.NotifyApplied(5, func() { called.Add(1) })
		p.add(t, event.Added, cm("a", "opaque-7"))
		p.drain()
		if called.Load() != 1 {
			t.Fatalf("waiter called %d times once unordered, want 1", called.Load())
		}
		if _, ok := p.c.Applied(); ok {
			t.Fatal("Applied is ok after a version that is not an integer")
		}
	})
}
