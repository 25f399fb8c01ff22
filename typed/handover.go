package typed

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
)

// RunHandingOver is Run for a Loop whose keys are moving to another process, such as a
// shard handed over to another replica: that process will reconcile every live key, as
// its cache lists them, but cannot know of the deletions this Loop has seen and not yet
// reconciled.
//
// Until ctx ends it is Run. When ctx ends, it stops taking keys, lets in-flight
// reconciles finish, and drops the live keys still queued and the retries scheduled, as
// Run does; then, while held lasts, it reconciles once each deletion still pending
// (queued, or with a retry or requeue scheduled), and each deletion its controller
// delivers meanwhile, with its last state and a context derived from held, Options.Workers
// at a time and one at a time per key. A key whose object exists again is not reconciled.
// A reconcile that fails, panics or asks to be requeued is reported, wrapped with
// ErrHandedOver, and not retried. It returns once no deletion is left, or at once after
// the in-flight reconciles when held ends (their context is held's), dropping the rest.
//
// A nil held is an error wrapping controller.ErrNilArgument, as is a Loop Run refuses.
func (l *Loop[T]) RunHandingOver(ctx, held context.Context) error {
	if held == nil {
		return fmt.Errorf("%w: RunHandingOver's held context", controller.ErrNilArgument)
	}
	return l.serve(ctx, held)
}

// drain reconciles the deletions run still holds the last state of, while held lasts.
// The queue has shut down and no worker runs; the Source's handler still records
// the deletions it delivers.
func (l *Loop[T]) drain(held context.Context, run *loopRun[T]) {
	l.mu.Lock()
	for _, t := range run.retries {
		if t.Stop() {
			run.timers.Done()
		}
	}
	clear(run.retries)
	l.mu.Unlock()
	l.reconcileDeletions(held, run, nil)
}

// reconcileDeletions reconciles, in rounds while held lasts, the deletions whose last
// state run holds and that mine selects (all when nil), but for keys whose object
// exists again, until a round finds none.
func (l *Loop[T]) reconcileDeletions(held context.Context, run *loopRun[T], mine func(key string, last T) bool) {
	for held.Err() == nil {
		l.mu.Lock()
		round := make(map[string]T, len(run.tombstones))
		for key, last := range run.tombstones {
			if mine != nil && !mine(key, last) {
				continue
			}
			if _, live := l.src.Get(key); !live {
				round[key] = last
			}
		}
		l.mu.Unlock()
		if len(round) == 0 {
			return
		}
		keys := make(chan string)
		var wg sync.WaitGroup
		for range min(l.opts.Workers, len(round)) {
			wg.Go(func() {
				for key := range keys {
					l.reconcileDeletion(held, run, key, round[key], mine != nil)
				}
			})
		}
		for key := range round {
			select {
			case keys <- key:
			case <-held.Done():
			}
		}
		close(keys)
		wg.Wait()
	}
}

// reconcileDeletion reconciles key's deletion with its last state during a hand-over,
// and forgets that state unless a newer deletion replaced it meanwhile.
func (l *Loop[T]) reconcileDeletion(held context.Context, run *loopRun[T], key string, last T, besideWorkers bool) {
	if held.Err() != nil {
		return
	}
	if besideWorkers { // a part's HandOver: it takes the workers' slots
		select {
		case run.slots <- struct{}{}:
			defer func() { <-run.slots }()
		case <-held.Done():
			return
		}
	}
	logger := klog.FromContext(held).WithValues("loop", l.opts.Name, "key", key)
	start := time.Now()
	res, err := l.reconcile(klog.NewContext(held, logger), deletion(key, last))
	l.metrics.Call(held, "ReconcileLatency", func(m Metrics) { m.ReconcileLatency(l.opts.Name, time.Since(start)) })
	if l.work.Set() {
		o := outcome(held, held, res.requeues(), err)
		l.work.Call(held, "Reconciled", func(m WorkMetrics) { m.Reconciled(l.opts.Name, o) })
	}
	l.mu.Lock()
	if run.tombstones[key] == last {
		delete(run.tombstones, key)
	}
	l.mu.Unlock()
	switch {
	case err != nil:
		l.report(held, logger, key, fmt.Errorf("%w: %w", ErrHandedOver, err), IsTerminal(err))
	case res.requeues():
		l.report(held, logger, key, fmt.Errorf("%w: it asked to be requeued (after %v, at %v)", ErrHandedOver, res.RequeueAfter, res.RequeueAt), false)
	}
}
