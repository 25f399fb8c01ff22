package bench

import "testing"

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
		pushAll(b, w, d)
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
	gcNow()
	b.ResetTimer()
	var m allocMeter
	for op := range b.N {
		if op > 0 {
			d.Renew()
			gcNow()
		}
		streamAlone(b, d, pushAll, &m)
	}
	b.ReportMetric(float64(b.N*d.Events)/m.elapsed.Seconds(), "events/s")
	m.report(b, b.N*d.Events, "event")
}
