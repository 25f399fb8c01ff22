package queue_test

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// TestFIFOPoppedKeys checks that keys popped and pushed again, while the FIFO keeps
// popped keys in its map and when it drops them (on emptying, and when they outnumber
// the pending keys), behave as newly pending keys: in line order, with their own events,
// and with the known lookup asked again.
func TestFIFOPoppedKeys(t *testing.T) {
	n := 5*queue.ShrinkPeak + 100 // enough pops to drop the popped keys while keys are pending
	asked := 0
	f := queue.NewFIFO(queue.Compress, func(string, ev) bool { asked++; return true })
	key := func(i int) string { return "ns/k" + strconv.Itoa(i) }
	for i := range n {
		f.Push(key(i), mod(strconv.Itoa(i+1)), i%2 == 0)
	}
	var buf []ev
	line := []string{}
	for i := range n {
		k, events, marked, ok := f.Pop(buf[:0])
		if !ok || k != key(i) || len(events) != 1 || marked != (i%2 == 0) {
			t.Fatalf("pop %d: got %q %v marked=%v ok=%v", i, k, events, marked, ok)
		}
		buf = events
		if f.Pending(k) != nil {
			t.Fatalf("popped key %s is still pending", k)
		}
		if i%3 == 0 {
			// Pushed again: a deletion asks whether the consumer knows the key, and joins the
			// end of the line.
			before := asked
			f.Push(k, del(strconv.Itoa(n+i+1)), false)
			if asked != before+1 {
				t.Fatalf("pushing popped key %s again did not ask whether it is known", k)
			}
			line = append(line, k)
		}
		if i%7 == 0 {
			// A resync of a key the consumer does not know is dropped: the key stays popped.
			g := queue.NewFIFO(queue.Compress, func(string, ev) bool { return false })
			g.Push(k, syncMod("1"), false)
			if g.Len() != 0 {
				t.Fatal("a resync of an unknown key is pending")
			}
		}
		if want := n - i - 1 + len(line); f.Len() != want {
			t.Fatalf("after pop %d: Len %d, want %d", i, f.Len(), want)
		}
	}
	if f.Marked() != 0 {
		t.Fatalf("Marked = %d after popping every marked key", f.Marked())
	}
	if got := f.Keys(); len(got) != len(line) || got[0] != line[0] || got[len(got)-1] != line[len(line)-1] {
		t.Fatalf("line after pushing popped keys again: %d keys, want %d in push order", len(got), len(line))
	}
	for i, k := range line {
		got, events, _, ok := f.Pop(buf[:0])
		if !ok || got != k || len(events) != 1 || events[0].Type != event.Deleted {
			t.Fatalf("pop %d of the keys pushed again: %q %v, want %s deleted", i, got, events, k)
		}
		buf = events
	}
	if _, _, _, ok := f.Pop(buf[:0]); ok || f.Len() != 0 {
		t.Fatal("the FIFO is not empty")
	}
	// Empty, it takes the same keys again as new ones.
	f.Push(key(1), add("1"), true)
	if q := f.Pending(key(1)); q == nil || len(q.Events()) != 1 || f.Len() != 1 || f.Marked() != 1 {
		t.Fatal("a key pushed into the emptied FIFO is not pending as new")
	}
	// A popped key whose first new event is dropped (a deletion of a key the consumer does
	// not know) is not pending, and a later push still takes its entry back.
	g := queue.NewFIFO(queue.Compress, func(string, ev) bool { return false })
	g.Push("ns/a", add("1"), false)
	g.Push("ns/b", add("2"), false)
	g.Pop(nil)
	g.Push("ns/a", del("3"), false)
	if g.Pending("ns/a") != nil || g.Len() != 1 {
		t.Fatal("a deletion of an unknown popped key is pending")
	}
	g.Push("ns/a", add("4"), false)
	if q := g.Pending("ns/a"); q == nil || g.Len() != 2 || g.Keys()[1] != "ns/a" {
		t.Fatal("a popped key pushed again is not pending at the end of the line")
	}
}

// TestFIFONewKeyTakesAPoppedKeysEntry checks that a new key pushed while no recycled entry
// is free takes a popped key's entry, as pushes and pops interleave while a list drains,
// and that the popped key, pushed again, is then pending as new.
func TestFIFONewKeyTakesAPoppedKeysEntry(t *testing.T) {
	asked := 0
	f := queue.NewFIFO(queue.Compress, func(string, ev) bool { asked++; return true })
	f.Push("ns/a", add("1"), false)
	f.Push("ns/b", add("2"), false)
	if k, _, _, _ := f.Pop(nil); k != "ns/a" {
		t.Fatalf("popped %q, want ns/a", k)
	}
	f.Push("ns/c", add("3"), false) // takes ns/a's entry
	if f.Pending("ns/a") != nil || f.Len() != 2 {
		t.Fatalf("after a new key took a popped key's entry: ns/a pending %v, Len %d", f.Pending("ns/a") != nil, f.Len())
	}
	if q := f.Pending("ns/c"); q == nil || len(q.Events()) != 1 || q.Events()[0].Object.GetResourceVersion() != "3" {
		t.Fatal("ns/c does not hold its own event")
	}
	before := asked
	f.Push("ns/a", del("4"), false)
	if asked != before+1 {
		t.Fatal("pushing ns/a again did not ask whether the consumer knows it")
	}
	var got []string
	for {
		k, _, _, ok := f.Pop(nil)
		if !ok {
			break
		}
		got = append(got, k)
	}
	if diff := cmp.Diff([]string{"ns/b", "ns/c", "ns/a"}, got); diff != "" {
		t.Fatalf("pop order (-want +got):\n%s", diff)
	}
}
