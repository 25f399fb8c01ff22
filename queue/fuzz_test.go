package queue_test

import (
	"strconv"
	"testing"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/fuzzseed"
	"github.com/typedinformer/typedinformer/queue"
)

// fuzzEvents are the kinds of event the fuzz targets push, one per byte value modulo
// their number (the first five are FuzzCompression's).
var fuzzEvents = []func(rv string) ev{add, mod, del, syncMod, unknownDel, syncAdd}

// FuzzCompression pushes random events for one key and checks the compression against a
// model that applies every event in order: the queue never holds more than
// MaxCompressedLen events, and applying the queue gives the same existence and the same
// newest state as applying every event.
func FuzzCompression(f *testing.F) {
	fuzzseed.Add(f, "FuzzCompression")
	f.Fuzz(func(t *testing.T, known bool, ops []byte) {
		f := queue.NewFIFO(queue.Compress, func(string, ev) bool { return known })
		exists, last := known, ""
		for i, b := range ops {
			rv := strconv.Itoa(i + 1)
			e := fuzzEvents[b%5](rv)
			if e.Sync && e.Type == event.Modified && !exists {
				continue // resyncs only ever come for objects the cache holds
			}
			f.Push("ns/a", e, false)
			if e.Type == event.Deleted {
				exists = false
			} else {
				exists, last = true, rv
			}
			q := f.Pending("ns/a")
			if q == nil {
				// An empty queue is only right when the consumer's view does not change.
				if exists != known {
					t.Fatalf("after %d ops the queue is empty but exists=%v, known before=%v", i+1, exists, known)
				}
				continue
			}
			if n := len(q.Events()); n > queue.MaxCompressedLen {
				t.Fatalf("queue holds %d events, more than %d", n, queue.MaxCompressedLen)
			}
			if q.KnownAfter() != exists {
				t.Fatalf("after %d ops applying the queue leaves exists=%v, the model %v", i+1, q.KnownAfter(), exists)
			}
			if tail, _ := q.Last(); exists && tail.Object.ResourceVersion != last {
				t.Fatalf("newest pending state is %s, the model's %s", tail.Object.ResourceVersion, last)
			}
		}
	})
}
