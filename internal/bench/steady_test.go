package bench

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// steadyBatch is how many modifications one op of BenchmarkSteadyState streams: enough
// for a meaningful figure with -benchtime 1x (one op), as `make bench` runs it.
const steadyBatch = 500_000

func benchSteadyState(b *testing.B, lib library, d *Dataset) {
	defer checkLeaks(b, nil)()
	b.StopTimer()
	rec := &recorder{isFinal: d.IsFinal}
	inf, w := startSynced(b, lib, NewSource(d.List), rec, d.Keys)
	defer stopAndCheck(b, inf)
	gcNow()
	b.ResetTimer()

	var m allocMeter
	for op := range b.N {
		if op > 0 {
			b.StopTimer()
			d.Renew()
			gcNow()
			b.StartTimer()
		}
		caughtUp := rec.expectFinals(d.Touched())
		m.begin(b)
		for i := range d.Events {
			if !w.Send(d.Event(i)) {
				b.Fatal("the watch was stopped during the benchmark")
			}
		}
		wait(b, caughtUp, "the handler to see the last state of every key")
		m.end(b)
	}
	events := b.N * d.Events
	b.ReportMetric(float64(events)/m.elapsed.Seconds(), "events/s")
	m.report(b, events, "event")
	b.ReportMetric(float64(rec.updates.Load())/float64(events), "handled/event")
}

// watchAlone is the lib= name of the steady-state input measured without any library.
const watchAlone = "watch-alone"

// benchWatchAlone measures the ceiling of BenchmarkSteadyState: the same stream through
// the same in-memory watch, read by a goroutine that does nothing else. No library can
// deliver events faster than its input hands them over.
func benchWatchAlone(b *testing.B, d *Dataset) {
	defer checkLeaks(b, nil)()
	b.StopTimer()
	w, err := NewSource(d.List).Watch(b.Context(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	read := make(chan int)
	go func() {
		n := 0
		for e := range w.ResultChan() {
			if e.Object != nil {
				n++
			}
		}
		read <- n
	}()
	gcNow()
	b.ResetTimer()
	var m allocMeter
	for op := range b.N {
		if op > 0 {
			b.StopTimer()
			d.Renew()
			gcNow()
			b.StartTimer()
		}
		m.begin(b)
		for i := range d.Events {
			if !w.(*Watch).Send(d.Event(i)) {
				b.Fatal("the watch was stopped during the benchmark")
			}
		}
		m.end(b)
	}
	w.Stop()
	if n := <-read; n != b.N*d.Events {
		b.Fatalf("the reader got %d events, want %d", n, b.N*d.Events)
	}
	b.ReportMetric(float64(b.N*d.Events)/m.elapsed.Seconds(), "events/s")
	m.report(b, b.N*d.Events, "event")
}
