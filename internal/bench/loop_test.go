package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed"
)

const (
	// loopBatch is how many modifications one round of BenchmarkReconcileLoop streams
	// into each Loop.
	loopBatch = 200_000
	// loopRounds is how many rounds one op runs, the two Loops in turn.
	loopRounds = 5
)

// BenchmarkReconcileLoop measures what read-your-writes costs keys that have no write
// pending: typedinformer alone (the gate is its own). Two Loops run side by side over
// caches of the same 1,000 ConfigMaps, one with read-your-writes (the default), one with
// typed.Options.DisableReadYourWrites; their reconcilers only read the request, so no key
// ever waits. Each op runs loopRounds rounds; each round streams the same loopBatch
// modifications (prebuilt, round robin over the keys) through the watch to the gated Loop,
// then to the ungated one, each timed until every key has been reconciled with its last
// state. Pairing the rounds keeps the machine's noise out of the ratio: gated÷ungated is
// the median of the rounds' ratios of events/s. The figures per reconcile divide by the
// reconciles (a Loop merges the events of a key still queued).
func BenchmarkReconcileLoop(b *testing.B) {
	d := NewDataset(1_000, loopBatch)
	b.Run(fmt.Sprintf("objects=%d", d.Keys), func(b *testing.B) { benchReconcileLoop(b, d) })
}

// loopRun is a controller and a Loop over it, counting reconciles and final states.
type loopRun struct {
	w          *Watch
	reconciles atomic.Int64
	finals     atomic.Pointer[countdown]
	m          allocMeter
	rates      []float64
	reconciled int64
}

func startLoop(b *testing.B, ctx context.Context, wg *sync.WaitGroup, d *Dataset, disable bool) *loopRun {
	b.Helper()
	src := NewSource(d.List)
	c, err := controller.New(src, controller.Options[*corev1.ConfigMap]{})
	if err != nil {
		b.Fatal(err)
	}
	r := &loopRun{}
	loop, err := typed.NewLoop(c, typed.ReconcilerFunc[*corev1.ConfigMap](func(_ context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
		r.reconciles.Add(1)
		if req.Object != nil && d.IsFinal(req.Object) {
			if cd := r.finals.Load(); cd != nil {
				cd.hit()
			}
		}
		return typed.Result{}, nil
	}), typed.Options{Workers: 2, DisableReadYourWrites: disable})
	if err != nil {
		b.Fatal(err)
	}
	wg.Go(func() { _ = c.Run(ctx) })
	wg.Go(func() { _ = loop.Run(ctx) })
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if r.w, err = src.NextWatch(wctx); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(waitTimeout); r.reconciles.Load() < int64(d.Keys); {
		if time.Now().After(deadline) {
			b.Fatal("timed out waiting for the initial reconciles")
		}
		time.Sleep(time.Millisecond)
	}
	return r
}

// round streams d's events into r's watch and waits until every key has been reconciled
// with its last state.
func (r *loopRun) round(b *testing.B, d *Dataset) {
	cd := newCountdown(d.Touched())
	r.finals.Store(cd)
	start := r.reconciles.Load()
	gcNow()
	t0 := time.Now()
	r.m.begin(b)
	for i := range d.Events {
		if !r.w.Send(d.Event(i)) {
			b.Fatal("the watch was stopped during the benchmark")
		}
	}
	wait(b, cd.done, "every key reconciled with its last state")
	r.m.end(b)
	r.rates = append(r.rates, float64(d.Events)/time.Since(t0).Seconds())
	r.reconciled += r.reconciles.Load() - start
}

func benchReconcileLoop(b *testing.B, d *Dataset) {
	defer checkLeaks(b, nil)()
	b.StopTimer()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	gated, ungated := startLoop(b, ctx, &wg, d, false), startLoop(b, ctx, &wg, d, true)
	b.ResetTimer()
	b.StopTimer()

	var ratios []float64
	for op := range b.N * loopRounds {
		if op > 0 {
			d.Renew()
		}
		gated.round(b, d)
		ungated.round(b, d)
		ratios = append(ratios, gated.rates[op]/ungated.rates[op])
	}
	events := b.N * loopRounds * d.Events
	b.ReportMetric(sortedMedian(gated.rates), "events/s")
	b.ReportMetric(sortedMedian(ungated.rates), "ungated-events/s")
	b.ReportMetric(sortedMedian(ratios), "gated/ungated")
	for _, l := range []struct {
		prefix string
		r      *loopRun
	}{{"", gated}, {"ungated-", ungated}} {
		n := float64(l.r.reconciled)
		b.ReportMetric(n/float64(events), l.prefix+"reconciles/event")
		b.ReportMetric(float64(l.r.m.objs)/n, l.prefix+"allocs/reconcile")
		if _, ok := processCPU(); ok {
			b.ReportMetric(float64(l.r.m.cpu.Nanoseconds())/n, l.prefix+"cpu-ns/reconcile")
		}
	}
}

// sortedMedian returns the median of v, which it does not change.
func sortedMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return median(s)
}
