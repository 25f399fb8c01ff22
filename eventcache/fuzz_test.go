package eventcache

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/fuzzseed"
	"github.com/typedinformer/typedinformer/queue"
)

// FuzzEventQueueCollection drives a collection with random Add, Replace (complete and
// incomplete), Synchronize and drain sequences and checks it against a reference model
// that applies every operation in order with no queues (a complete list replaces the
// model, an incomplete one only adds to it): after a full drain the known objects, and what the deliveries
// add up to, equal the model (nothing lost, nothing resurrected), every delivery follows
// from the ones before it (internal/testsupport/eventcheck), and no key's queue grows past the
// compression bound. Batches are applied by key (Apply) or to the entries the backlog
// found (ApplyEntries, as Drain does), interleaved, and after a full drain the store holds
// an entry for the known keys only.
func FuzzEventQueueCollection(f *testing.F) {
	fuzzseed.Add(f, "FuzzEventQueueCollection")
	keys := []string{"a", "b", "c", "d", "e"}
	f.Fuzz(func(t *testing.T, ops []byte) {
		w := NewWriter[obj](nil)
		sink := eventcheck.New[obj]("sink")
		c := NewEventQueueCollection(w.Store(), Options[obj]{})
		rtc := NewResourceTrackingConsumer[obj](w, sink, nil)
		byEntry := c.byEntry(rtc)
		model := map[string]obj{}
		rv := 0
		next := func() string { rv++; return strconv.Itoa(rv) }
		drainAll := func() {
			for c.backlog.Consume(byEntry, math.MaxInt) > 0 {
			}
			if n, known := len(w.s.items), w.Store().Len(); n != known || known != len(model) {
				t.Fatalf("after a full drain the store has %d entries and %d known objects, want %d of each", n, known, len(model))
			}
			got := map[string]obj{}
			w.Store().Range(func(k string, o obj) bool { got[k] = o; return true })
			if diff := cmp.Diff(model, got); diff != "" {
				t.Fatalf("known objects differ from the model (-model +known):\n%s", diff)
			}
			if diff := cmp.Diff(model, sink.Known()); diff != "" {
				t.Fatalf("what the sink was told differs from the model (-model +sink):\n%s", diff)
			}
			if problems := sink.Problems(); len(problems) > 0 {
				t.Fatalf("inconsistent deliveries:\n%s", strings.Join(problems, "\n"))
			}
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%8, ops[i+1]
			key := keys[int(arg)%len(keys)]
			switch op {
			case 0, 1, 2:
				typ := []event.Type{event.Added, event.Modified, event.Deleted}[op]
				o := cm(key, next())
				if err := c.Add(ev{Type: typ, Object: o}); err != nil {
					t.Fatal(err)
				}
				if typ == event.Deleted {
					delete(model, "ns/"+key)
				} else {
					model["ns/"+key] = o
				}
			case 3, 7:
				var list []obj
				completeness := CompleteList
				if op == 7 {
					// Unread items may be any of the unlisted keys: nothing is deleted.
					completeness = IncompleteList
				} else {
					model = map[string]obj{}
				}
				for j, k := range keys {
					if arg&(1<<j) != 0 {
						o := cm(k, next())
						list = append(list, o)
						model["ns/"+k] = o
					}
				}
				if err := c.Replace(list, strconv.Itoa(rv), completeness); err != nil {
					t.Fatal(err)
				}
			case 4:
				if err := c.Synchronize(); err != nil {
					t.Fatal(err)
				}
			case 5:
				// One batch of one to three keys, as the drain loop takes them.
				// By key or by entry, as the high bit says.
				if arg&0x80 != 0 {
					c.backlog.Consume(byEntry, int(arg)%3+1)
				} else {
					c.backlog.Consume(rtc, int(arg)%3+1)
				}
			case 6:
				drainAll()
			}
			c.backlog.Update(func(p queue.Pending[obj]) {
				p.Range(func(k string, events []event.Event[obj]) bool {
					if n := len(events); n > queue.MaxCompressedLen {
						t.Errorf("key %s holds %d pending events, more than %d", k, n, queue.MaxCompressedLen)
					}
					return true
				})
			})
			if t.Failed() {
				t.FailNow()
			}
		}
		drainAll()
	})
}
