package queue_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/fuzzseed"
	"github.com/typedinformer/typedinformer/queue"
)

// applier is a Consumer that keeps, per key, the newest state Apply was handed: what a
// store would hold.
type applier struct {
	state map[string]applied
}

type applied struct {
	exists bool
	rv     uint64
}

func (a *applier) Apply(batch []ev) ([]ev, []error) {
	for _, e := range batch {
		rv, _ := strconv.ParseUint(e.Object.ResourceVersion, 10, 64)
		a.state[e.Key] = applied{exists: e.Type != event.Deleted, rv: rv}
	}
	return batch, nil
}
func (a *applier) Deliver([]ev)   {}
func (a *applier) Report([]error) {}

func tracked(calls *atomic.Int64) *queue.Backlog[*corev1.ConfigMap] {
	return queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{OnApplied: func() { calls.Add(1) }})
}

func wantApplied(t *testing.T, b *queue.Backlog[*corev1.ConfigMap], want uint64) {
	t.Helper()
	if got, ordered := b.Applied(); got != want || !ordered {
		t.Fatalf("Applied() = %d, %v; want %d, true", got, ordered, want)
	}
}

// Keys are served in the order they became pending, not by resource version, so the
// watermark is not the version of the last event applied: after A (through 12) is applied,
// B's 7 is still pending, and a reader must not be told that everything up to 12 is in.
func TestAppliedIsALowWatermarkNotTheVersionOfTheLastEventApplied(t *testing.T) {
	var calls atomic.Int64
	b := tracked(&calls)
	c := &applier{state: map[string]applied{}}
	push(b, "a", "5", event.Added)
	push(b, "b", "7", event.Added)
	push(b, "a", "12", event.Modified)
	wantApplied(t, b, 0)
	if n := b.Consume(c, 1); n != 1 || c.state["ns/a"].rv != 12 {
		t.Fatalf("consumed %d keys, a at %d; want a through 12", n, c.state["ns/a"].rv)
	}
	wantApplied(t, b, 5)
	b.Consume(c, 1)
	wantApplied(t, b, 12)
	if calls.Load() == 0 {
		t.Fatal("OnApplied was never called")
	}
}

// A bookmark raises the watermark once the events pushed before it are applied, and at
// once when nothing is pending: it is how a cache that sees no event for a written object
// (outside its selector) still catches up.
func TestProgressRaisesTheWatermarkOnceTheEventsBeforeItAreApplied(t *testing.T) {
	var calls atomic.Int64
	b := tracked(&calls)
	c := &applier{state: map[string]applied{}}
	b.Progress("40")
	b.Consume(c, 1)
	wantApplied(t, b, 40)
	push(b, "a", "41", event.Added)
	b.Progress("50")
	b.Consume(c, 0) // sorts the inbox only
	wantApplied(t, b, 40)
	b.Consume(c, 1)
	wantApplied(t, b, 50)
	b.Progress("45") // a late bookmark never lowers it
	b.Consume(c, 1)
	wantApplied(t, b, 50)
}

// A relist replaces what was applied: the watermark follows its resource version down,
// and keys pending from before it do not hold it above.
func TestListedSetsTheWatermarkToTheListsVersionLowerOrNot(t *testing.T) {
	var calls atomic.Int64
	b := tracked(&calls)
	c := &applier{state: map[string]applied{}}
	push(b, "a", "30", event.Added)
	b.Consume(c, 1)
	push(b, "b", "31", event.Added)
	wantApplied(t, b, 30)
	b.Update(func(p queue.Pending[*corev1.ConfigMap]) {
		p.Push(ev{Type: event.Added, Key: "ns/c", Object: cm("c", "20"), Sync: true})
		p.Listed("25")
	})
	wantApplied(t, b, 25)
	b.Consume(c, 2)
	wantApplied(t, b, 25)
	push(b, "d", "26", event.Added)
	b.Consume(c, 1)
	wantApplied(t, b, 26)
}

// A resource version that is not an integer cannot be compared: the backlog says so for
// good, and calls OnApplied so that whoever waits on it is told.
func TestAVersionThatIsNotAnIntegerMakesTheBacklogUnordered(t *testing.T) {
	for name, feed := range map[string]func(*queue.Backlog[*corev1.ConfigMap]){
		"event":    func(b *queue.Backlog[*corev1.ConfigMap]) { push(b, "a", "x7", event.Added) },
		"progress": func(b *queue.Backlog[*corev1.ConfigMap]) { b.Progress("x7") },
		"list": func(b *queue.Backlog[*corev1.ConfigMap]) {
			b.Update(func(p queue.Pending[*corev1.ConfigMap]) { p.Listed("x7") })
		},
	} {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int64
			b := tracked(&calls)
			feed(b)
			b.Consume(&applier{state: map[string]applied{}}, 1)
			push(b, "b", "8", event.Added)
			b.Consume(&applier{state: map[string]applied{}}, 1)
			if _, ordered := b.Applied(); ordered {
				t.Fatal("Applied says ordered after a version that is not an integer")
			}
			if calls.Load() == 0 {
				t.Fatal("OnApplied was not called")
			}
		})
	}
}

// Without OnApplied the backlog tracks nothing and parses no version.
func TestAppliedIsNotTrackedWithoutOnApplied(t *testing.T) {
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
	push(b, "a", "not-a-number", event.Added)
	b.Consume(&applier{state: map[string]applied{}}, 1)
	if rv, ordered := b.Applied(); rv != 0 || !ordered {
		t.Fatalf("Applied() = %d, %v without OnApplied; want 0, true", rv, ordered)
	}
}

// FuzzAppliedIsALowWatermark drives a backlog with events for a few keys (additions,
// changes, deletions, with increasing versions), bookmarks and batches of every size, and
// checks after each step what Applied promises: for every event pushed up to the
// watermark, what the consumer holds for its key is that event's state or a newer one.
func FuzzAppliedIsALowWatermark(f *testing.F) {
	fuzzseed.Add(f, "FuzzAppliedIsALowWatermark")
	f.Fuzz(func(t *testing.T, ops []byte) {
		var calls atomic.Int64
		b := tracked(&calls)
		c := &applier{state: map[string]applied{}}
		type pushed struct {
			key string
			rv  uint64
			del bool
		}
		var log []pushed
		exists := map[string]bool{}
		var rv uint64
		for _, op := range ops {
			key := "ns/" + string(rune('a'+op%4))
			switch op >> 2 % 4 {
			case 0: // an event for key
				rv++
				typ := event.Added
				if exists[key] {
					typ = []event.Type{event.Modified, event.Deleted}[op>>4%2]
				}
				exists[key] = typ != event.Deleted
				b.Push(ev{Type: typ, Key: key, Object: cm(key[3:], strconv.FormatUint(rv, 10))})
				log = append(log, pushed{key, rv, typ == event.Deleted})
			case 1: // a bookmark at the newest version
				if rv > 0 {
					b.Progress(strconv.FormatUint(rv, 10))
				}
			default: // a batch of 0 to 7 keys
				b.Consume(c, int(op>>4))
			}
			w, ordered := b.Applied()
			if !ordered {
				t.Fatal("unordered, with integer versions only")
			}
			newest := map[string]pushed{}
			lastDeleted := map[string]uint64{}
			for _, p := range log {
				if p.rv <= w {
					newest[p.key] = p
				}
				if p.del {
					lastDeleted[p.key] = p.rv
				}
			}
			for key, p := range newest {
				s := c.state[key]
				switch {
				case s.rv >= p.rv:
				case !s.exists && lastDeleted[key] >= p.rv:
					// Not held: an addition of the key and a later deletion cancelled out,
					// which leaves it as that deletion would.
				default:
					t.Fatalf("watermark %d, but %s is at %+v, older than its event %+v", w, key, s, p)
				}
			}
		}
	})
}
