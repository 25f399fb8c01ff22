package eventcache

import (
	"math"
	"strconv"
	"testing"
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
