package eventcache

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/event"
)

// BenchmarkEventQueueCollection measures the operations that change the collection as a
// whole, with 10,000 known objects, each op followed by a drain into the known objects:
// op=relist alternates a complete list of every object with one that lacks a tenth of
// them (so every other op synthesises 1,000 deletions and the next adds them back);
// op=resync is a Synchronize of every object.
func BenchmarkEventQueueCollection(b *testing.B) {
	const n = 10_000
	all := make([]obj, n)
	for i := range all {
		all[i] = cm("o"+strconv.Itoa(i), strconv.Itoa(i+1))
	}
	setup := func(b *testing.B) *pipeline {
		w := NewWriter[obj](nil)
		p := &pipeline{c: NewEventQueueCollection(w.Store(), Options[obj]{}), rec: &recorder{}}
		p.rtc = NewResourceTrackingConsumer[obj](w, SinkFunc[obj](func([]ev) {}), nil)
		if err := p.c.Replace(all, "", CompleteList); err != nil {
			b.Fatal(err)
		}
		for p.c.backlog.Consume(p.c.byEntry(p.rtc), math.MaxInt) > 0 {
		}
		b.ReportAllocs()
		b.ResetTimer()
		return p
	}
	b.Run("op=relist", func(b *testing.B) {
		p := setup(b)
		for i := range b.N {
			list := all
			if i%2 == 0 {
				list = all[:n-n/10]
			}
			if err := p.c.Replace(list, "", CompleteList); err != nil {
				b.Fatal(err)
			}
			for p.c.backlog.Consume(p.c.byEntry(p.rtc), math.MaxInt) > 0 {
			}
		}
	})
	b.Run("op=resync", func(b *testing.B) {
		p := setup(b)
		for range b.N {
			if err := p.c.Synchronize(); err != nil {
				b.Fatal(err)
			}
			for p.c.backlog.Consume(p.c.byEntry(p.rtc), math.MaxInt) > 0 {
			}
		}
	})
}

// BenchmarkModifications measures the steady state on one goroutine: watch
// modifications of known objects (each with its own UID, as the server assigns them),
// pushed and drained in batches of 128, with 1,000 and 100,000 known objects. Each event
// carries a new object whose strings are its own, so the known object it replaces is
// read from memory as a real watch's would be.
func BenchmarkModifications(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run("objects="+strconv.Itoa(n), func(b *testing.B) {
			known := make([]obj, n)
			for i := range known {
				known[i] = cm("o"+strconv.Itoa(i), "1")
				known[i].UID = types.UID(fmt.Sprintf("6f1c9a3e-0a5b-4c1e-9d5e-%012d", i))
			}
			// next holds the modifications of 4 rounds over every object; made again,
			// with newer resource versions, once they are used up.
			next, rv := make([]obj, 4*n), 1
			renew := func() {
				for i := range next {
					o := known[i%n].DeepCopy()
					o.UID = types.UID(strings.Clone(string(o.UID)))
					rv++
					o.ResourceVersion = strconv.Itoa(rv)
					next[i] = o
				}
			}
			renew()
			w := NewWriter[obj](nil)
			c := NewEventQueueCollection(w.Store(), Options[obj]{})
			var errs []error
			consumer := c.byEntry(NewResourceTrackingConsumer[obj](w, SinkFunc[obj](func([]ev) {}), func(err error) { errs = append(errs, err) }))
			if err := c.Replace(known, "", CompleteList); err != nil {
				b.Fatal(err)
			}
			for c.backlog.Consume(consumer, math.MaxInt) > 0 {
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				for range 128 {
					if err := c.Add(ev{Type: event.Modified, Object: next[i]}); err != nil {
						b.Fatal(err)
					}
					if i++; i == len(next) {
						b.StopTimer()
						i = 0
						renew()
						b.StartTimer()
					}
				}
				for c.backlog.Consume(consumer, math.MaxInt) > 0 {
				}
			}
			if len(errs) > 0 {
				b.Fatalf("%d errors, the first: %v", len(errs), errs[0])
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*128), "ns/event")
		})
	}
}
