package bench

import (
	"runtime"
	"testing"
	"time"
)

// stalledKeys is how many objects BenchmarkStalledHandler modifies over and over.
const stalledKeys = 10_000

func benchStalled(b *testing.B, lib library, d *Dataset) {
	defer checkLeaks(b, nil)()
	b.StopTimer()
	b.ResetTimer()
	var m allocMeter
	var grown float64
	for range b.N {
		grown += stalledOnce(b, lib, d, &m) / float64(b.N)
	}
	b.ReportMetric(grown/(1<<20), "heap-MB")
	m.report(b, b.N*d.Events, "event")
}

// stalledOnce runs one stream and returns by how many bytes the heap grew.
func stalledOnce(b *testing.B, lib library, d *Dataset, m *allocMeter) float64 {
	block := make(chan struct{})
	rec := &recorder{block: block}
	inf, w := startSynced(b, lib, NewSource(d.List), rec, d.Keys)
	defer func() {
		close(block) // let the handler go, then stop: untimed
		stopAndCheck(b, inf)
	}()

	base := heapInUse()
	m.begin(b)
	for i := range d.Events {
		if !w.Send(d.Event(i)) {
			b.Fatal("the watch was stopped during the benchmark")
		}
	}
	waitCaughtUp(b, inf, d)
	m.end(b)
	grown := float64(heapInUse()) - float64(base)
	if rec.updates.Load() != 0 {
		b.Fatalf("the stalled handler returned %d times", rec.updates.Load())
	}
	return grown
}

// waitCaughtUp polls until the cache holds the last state of every key of d's stream.
// Both libraries update their cache right before handing an event to the handlers, so
// from then on every event has reached the handler's backlog (or was merged into it).
func waitCaughtUp(b *testing.B, inf informer, d *Dataset) {
	b.Helper()
	deadline := time.Now().Add(waitTimeout)
	for k := 0; k < d.Touched(); {
		if obj, _ := inf.get(d.Key(k)); obj == d.Final(k) {
			k++
			continue
		}
		if time.Now().After(deadline) {
			b.Fatalf("the cache did not catch up with the stream within %v", waitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// heapInUse returns the bytes in in-use heap spans after two garbage collections.
func heapInUse() uint64 {
	gcNow()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
