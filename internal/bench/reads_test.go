package bench

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// readKeys is how many objects BenchmarkReads caches: readKeys/Namespaces per namespace.
const readKeys = 10_000

// writeRate is how many modifications per second stream in while BenchmarkReads reads:
// a fixed rate, the same for both libraries, so that the readers of both compete with
// the same amount of writing.
const writeRate = 10_000

// readOp is one kind of read, and how many of them one op does: enough for a meaningful
// figure with -benchtime 1x.
type readOp struct {
	name  string
	batch int
	read  func(inf informer, i int, d *Dataset) int
}

// readOps are the kinds of read BenchmarkReads compares.
var readOps = []readOp{
	{name: "get", batch: 4_000_000, read: func(inf informer, i int, d *Dataset) int {
		if _, ok := inf.get(d.Key(i % d.Keys)); ok {
			return 1
		}
		return 0
	}},
	{name: "list", batch: 1_000, read: func(inf informer, _ int, _ *Dataset) int { return inf.list() }},
	{name: "by-namespace", batch: 5_000, read: func(inf informer, i int, _ *Dataset) int {
		return inf.byNamespace(namespaceNames[i%Namespaces])
	}},
}

// namespaceNames avoids formatting a namespace name in the read loop.
var namespaceNames = func() []string {
	n := make([]string, Namespaces)
	for i := range n {
		n[i] = fmt.Sprintf("ns-%d", i)
	}
	return n
}()

// sink keeps the results of reads alive, so that the compiler cannot drop them.
var sink int

func benchReads(b *testing.B, lib library, d *Dataset, op readOp) {
	defer checkLeaks(b, nil)()
	b.StopTimer()
	rec := &recorder{}
	inf, w := startSynced(b, lib, NewSource(d.List), rec, d.Keys)
	defer stopAndCheck(b, inf)
	gcNow()
	writes, stopWriting := writeAtRate(w, d)
	defer stopWriting() // in case b fails; a no-op otherwise
	b.ResetTimer()

	var m allocMeter
	found := 0
	m.begin(b)
	for i := range b.N * op.batch {
		found += op.read(inf, i, d)
	}
	m.end(b)
	written := stopWriting()
	sink = found

	m.report(b, b.N*op.batch, "read")
	b.ReportMetric(float64(written)/writes.Seconds(), "writes/s")
}

// writeAtRate pushes d's modifications into w at writeRate, on average, until the
// returned function is called, which stops the writer and returns how many events it
// pushed; calling it again returns the same count. The writer catches up after it was held up, so that both libraries receive the
// same number of writes unless one cannot absorb writeRate while being read. The returned
// clock tells, once the writer has stopped, how long it ran.
func writeAtRate(w *Watch, d *Dataset) (*writeClock, func() int) {
	clk := &writeClock{start: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	n := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			due := int(time.Since(clk.start).Seconds() * writeRate)
			for ; n < due; n++ {
				if !w.Send(d.Event(n)) {
					return
				}
			}
		}
	}()
	var once sync.Once
	return clk, func() int {
		once.Do(func() {
			close(stop)
			wg.Wait()
			clk.end = time.Now()
		})
		return n
	}
}

// writeClock is how long a writer ran.
type writeClock struct{ start, end time.Time }

// Seconds returns the writer's running time in seconds.
func (c *writeClock) Seconds() float64 { return c.end.Sub(c.start).Seconds() }
