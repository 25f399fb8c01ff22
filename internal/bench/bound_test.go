package bench

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkSteadyStateBound puts typedinformer's steady state with the fresh input (the
// decode-realistic one: see Dataset) next to its bound, the same input read by a
// goroutine that does nothing else (lib=watch-alone of BenchmarkSteadyState), with
// 1,000 and 100,000 objects. Each op measures both, one after the other on the same
// Dataset: a batch of steadyBatch modifications into a synced typedinformer (the
// informer started and stopped outside the timed part), then the same number through a
// watch alone, so that a change in the machine's load falls on both. of-bound is
// typedinformer's events/s ÷ the watch alone's over all ops (1 is the bound).
//
// The watch alone keeps no object, where any cache keeps the newest object of every key:
// with 100,000 objects that is 100,000 decoded objects alive, which the garbage
// collector traces on every cycle, and a replaced one to find among them per event. Each
// op therefore also streams the batch into the least a cache can be (kept): the same
// reader storing each object into a map of one pointer per key, found by the key's bytes
// with one lookup and no allocation, filled with the listed objects before the timed
// part. of-kept is typedinformer's events/s ÷ its. Every rate and the CPU time per event
// of each are reported.
//
//	go test -run '^$' -bench SteadyStateBound -benchtime 3x ./internal/bench/
func BenchmarkSteadyStateBound(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			defer checkLeaks(b, nil)()
			lib, bound, kept := againstBound(b, NewFreshDataset(n, steadyBatch), pushAll)
			events := float64(b.N * steadyBatch)
			libRate, boundRate := events/lib.elapsed.Seconds(), events/bound.elapsed.Seconds()
			b.ReportMetric(libRate, "events/s")
			b.ReportMetric(boundRate, "bound-events/s")
			b.ReportMetric(libRate/boundRate, "of-bound")
			keptRate := events / kept.elapsed.Seconds()
			b.ReportMetric(keptRate, "kept-events/s")
			b.ReportMetric(libRate/keptRate, "of-kept")
			if _, ok := processCPU(); ok {
				b.ReportMetric(float64(lib.cpu.Nanoseconds())/events, "cpu-ns/event")
				b.ReportMetric(float64(bound.cpu.Nanoseconds())/events, "bound-cpu-ns/event")
				b.ReportMetric(float64(kept.cpu.Nanoseconds())/events, "kept-cpu-ns/event")
			}
			b.ReportMetric(0, "ns/op") // one op is three streams: the rates say it
		})
	}
}

// pacedInterval is the time between two events of BenchmarkSteadyStatePaced.
const pacedInterval = 200 * time.Microsecond

// BenchmarkSteadyStatePaced is BenchmarkSteadyStateBound's three streams with 10,000
// objects (as internal/bench/realapi's steady state) and the events paced, one every
// pacedInterval, as a real API server sends the updates of a cluster that is not busy:
// the pipeline goes idle between two events, and each event finds its goroutines parked
// and its data out of the CPU's caches. The rate is the pacing's; what tells the
// subjects apart is the process's CPU time per event, reported for each, and
// of-kept-cpu, typedinformer's ÷ the kept map's: what the pipeline costs beyond holding
// the objects, in the regime the in-memory benchmarks, which push as fast as they can,
// never reach.
//
//	go test -run '^$' -bench SteadyStatePaced -benchtime 1x -count 3 ./internal/bench/
func BenchmarkSteadyStatePaced(b *testing.B) {
	const objects, events = 10_000, 10_000
	if _, ok := processCPU(); !ok {
		b.Skip("this platform does not tell a process's CPU time")
	}
	defer checkLeaks(b, nil)()
	lib, bound, kept := againstBound(b, NewFreshDataset(objects, events), pushPaced)
	n := float64(b.N * events)
	b.ReportMetric(float64(lib.cpu.Nanoseconds())/n, "cpu-ns/event")
	b.ReportMetric(float64(bound.cpu.Nanoseconds())/n, "bound-cpu-ns/event")
	b.ReportMetric(float64(kept.cpu.Nanoseconds())/n, "kept-cpu-ns/event")
	b.ReportMetric(float64(lib.cpu)/float64(kept.cpu), "of-kept-cpu")
	b.ReportMetric(0, "ns/op") // one op is three streams: the CPU times say it
}

// againstBound runs b.N ops over d, each pushing d's events with push three times: into
// a synced typedinformer (the informer started and stopped outside the timed part),
// through a watch alone, and into the kept map (see BenchmarkSteadyStateBound), and
// returns the three meters.
func againstBound(b *testing.B, d *Dataset, push func(*testing.B, *Watch, *Dataset)) (lib, bound, kept allocMeter) {
	b.StopTimer()
	for range b.N {
		rec := &recorder{isFinal: d.IsFinal}
		inf, w := startSynced(b, libraries[0], NewSource(d.List), rec, d.Keys)
		d.Renew()
		gcNow()
		caughtUp := rec.expectFinals(d.Touched())
		lib.begin(b)
		push(b, w, d)
		wait(b, caughtUp, "the handler to see the last state of every key")
		lib.end(b)
		stopAndCheck(b, inf)

		d.Renew()
		gcNow()
		streamAlone(b, d, push, &bound)

		d.Renew()
		gcNow()
		streamIntoMap(b, d, push, &kept)
	}
	return lib, bound, kept
}

// streamAlone streams d's events with push through a new watch read by a goroutine that only counts
// them, timed by m: benchWatchAlone's op.
func streamAlone(b *testing.B, d *Dataset, push func(*testing.B, *Watch, *Dataset), m *allocMeter) {
	streamTo(b, d, push, m, func(events <-chan watch.Event) (n int) {
		for e := range events {
			if e.Object != nil {
				n++
			}
		}
		return n
	})
}

// slot is a key's place in streamIntoMap's map.
type slot struct{ obj *corev1.ConfigMap }

// streamIntoMap streams d's events with push through a new watch read by a goroutine that stores
// each object in a map by its key, timed by m: the least any cache does per event.
func streamIntoMap(b *testing.B, d *Dataset, push func(*testing.B, *Watch, *Dataset), m *allocMeter) {
	kept := make(map[string]*slot, d.Keys)
	for i := range d.List.Items {
		o := &d.List.Items[i]
		kept[o.Namespace+"/"+o.Name] = &slot{obj: o}
	}
	streamTo(b, d, push, m, func(events <-chan watch.Event) (n int) {
		var buf [128]byte
		for e := range events {
			o := e.Object.(*corev1.ConfigMap)
			key := append(append(append(buf[:0], o.Namespace...), '/'), o.Name...)
			if s := kept[string(key)]; s != nil {
				s.obj = o
				n++
			}
		}
		return n
	})
}

// streamTo pushes d's events with push, timed by m, through a new watch whose events read takes on
// a goroutine of its own, and fails b unless read took every one.
func streamTo(b *testing.B, d *Dataset, push func(*testing.B, *Watch, *Dataset), m *allocMeter, read func(<-chan watch.Event) int) {
	w, err := NewSource(d.List).Watch(b.Context(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	took := make(chan int, 1)
	go func() { took <- read(w.ResultChan()) }()
	m.begin(b)
	push(b, w.(*Watch), d)
	m.end(b)
	w.Stop()
	select {
	case n := <-took:
		if n != d.Events {
			b.Fatalf("the reader took %d events, want %d", n, d.Events)
		}
	case <-time.After(waitTimeout):
		b.Fatal("the reader did not finish")
	}
}

// pushAll pushes the events of d's stream through w, failing b if the watch stops.
func pushAll(b *testing.B, w *Watch, d *Dataset) {
	for i := range d.Events {
		if !w.Send(d.Event(i)) {
			b.Fatal("the watch was stopped during the benchmark")
		}
	}
}

// pushPaced pushes d's events through w as pushAll does, one every pacedInterval.
func pushPaced(b *testing.B, w *Watch, d *Dataset) {
	t := time.NewTicker(pacedInterval)
	defer t.Stop()
	for i := range d.Events {
		<-t.C
		if !w.Send(d.Event(i)) {
			b.Fatal("the watch was stopped during the benchmark")
		}
	}
}
