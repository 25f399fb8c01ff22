package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/typedinformer/typedinformer/event"
)

// ErrClosed is returned by Backlog.Drain once the backlog has been closed.
var ErrClosed = errors.New("backlog closed")

// maxBatch is the most keys Drain takes per lock acquisition. A batch amortises the lock,
// the wake-up and the consumer's own per-call costs over many keys while the producer
// runs ahead; it is small enough that Apply, which runs with the backlog locked, holds
// producers up for little longer than one key would.
const maxBatch = 128

// Consumer receives a Backlog's keys from its drain loop, a batch at a time. Each event
// of a batch carries its key in Event.Key; a batch holds every pending event of each of
// its keys, oldest first and grouped by key, keys in line order.
//
// Apply runs with the backlog locked, so that whoever changes the backlog (through Update)
// sees what Apply changed and the pending events as one consistent state; it returns the
// events to deliver (it may rewrite events in place, drop some, or return a new slice)
// and the errors to report. Deliver runs with nothing locked, so that producers never
// wait for it. Report, when Apply returned errors, runs after Deliver, with nothing
// locked and once the batch no longer counts as being consumed, so that it may call
// Between. Every Apply is followed by exactly one Deliver before the next Apply.
type Consumer[T event.Object] interface {
	Apply(batch []event.Event[T]) ([]event.Event[T], []error)
	Deliver(batch []event.Event[T])
	Report(errs []error)
}

// BacklogOptions configure a Backlog.
type BacklogOptions[T event.Object] struct {
	// Compression selects the compression rules; Compress by default.
	Compression Compression
	// Known reports whether the consumer knows key before first, its first pending event
	// (see NewFIFO); KnownFromFirstEvent when nil.
	Known func(key string, first event.Event[T]) bool
	// OnSynced, when set, is called once, with nothing locked, when the backlog has
	// synced (see Backlog.HasSynced). It runs on the goroutine that made it so, before
	// that goroutine consumes anything more.
	OnSynced func()
	// Depth, when set, is called with the number of pending keys after changes, with
	// nothing locked of the backlog. Calls are serialised and never report a depth older
	// than one already reported; changes that race with a call are reported by one more
	// call after it, with the newest depth, so the last call reports the current depth.
	// Depth may change the backlog (a change it makes is reported after it returns).
	Depth func(pendingKeys int)
}

// Backlog is the pipeline's one keyed-backlog stage: pending events per key (a FIFO,
// with its compression rules), a single drain loop that hands them to a Consumer in
// batches, initial-sync tracking, and pauses between batches for callers of Between. The
// event cache drains its Backlog into the consumer that keeps the known objects; every
// handler drains its own into the handler. All methods are safe for concurrent use.
//
// Initial-sync tracking: every key pushed before Seal is marked; the backlog has synced
// once it is sealed and every marked key has been delivered.
type Backlog[T event.Object] struct {
	mu sync.Mutex
	// cond wakes the drain loop (something is pending, the backlog closed, a Between
	// ended); idle wakes Between (no batch is being consumed any more).
	cond sync.Cond
	idle sync.Cond
	fifo *FIFO[T]
	opts BacklogOptions[T]

	sealed    bool
	synced    bool
	closed    bool
	parked    bool // the drain loop waits on cond: only then does a push signal it
	consuming bool // a batch is between its Apply and the end of its Deliver
	inflight  int  // marked keys in the batch being consumed
	pauses    int  // Between calls waiting or running: the drain loop holds off
	buf       []event.Event[T]

	// Depth reporting: depth is the newest pending count, written with mu held; dirty says
	// it has not been reported; reporting serialises the calls of opts.Depth.
	depth     atomic.Int64
	dirty     atomic.Bool
	reporting sync.Mutex
}

// NewBacklog returns an empty, unsealed Backlog.
func NewBacklog[T event.Object](opts BacklogOptions[T]) *Backlog[T] {
	if opts.Known == nil {
		opts.Known = KnownFromFirstEvent[T]
	}
	b := &Backlog[T]{fifo: NewFIFO(opts.Compression, opts.Known), opts: opts}
	b.cond.L = &b.mu
	b.idle.L = &b.mu
	return b
}

// Push adds e to key's pending events. It never waits for the consumer.
func (b *Backlog[T]) Push(key string, e event.Event[T]) {
	b.mu.Lock()
	b.fifo.Push(key, e, !b.sealed)
	b.changed()
}

// PushBatch adds every event of batch, each under its Event.Key, in order, with one lock
// acquisition. It never waits for the consumer.
func (b *Backlog[T]) PushBatch(batch []event.Event[T]) {
	b.mu.Lock()
	mark := !b.sealed
	for _, e := range batch {
		b.fifo.Push(e.Key, e, mark)
	}
	b.changed()
}

// Update calls fn with the backlog locked and its FIFO, for changes that must be atomic
// with respect to the consumer's Apply (a relist that reads the consumer's known objects
// and pushes many keys at once). mark is what fn must pass to FIFO.Push: whether pushes
// count toward the initial sync. fn must not call the Backlog.
func (b *Backlog[T]) Update(fn func(f *FIFO[T], mark bool)) {
	b.mu.Lock()
	fn(b.fifo, !b.sealed)
	b.changed()
}

// Seal ends the initial state: keys pushed from now on are not marked, and the backlog
// syncs once the marked keys are delivered. Seal is idempotent.
func (b *Backlog[T]) Seal() {
	b.mu.Lock()
	b.sealed = true
	b.changed()
}

// changed records a change made with mu held, wakes the drain loop if it is parked,
// unlocks, then runs the callbacks the change calls for.
func (b *Backlog[T]) changed() {
	if b.parked && b.fifo.Len() > 0 {
		b.cond.Signal()
	}
	syncedNow := b.checkSynced()
	b.noteDepth()
	b.mu.Unlock()
	if syncedNow && b.opts.OnSynced != nil {
		b.opts.OnSynced()
	}
	b.reportDepth()
}

// checkSynced flips synced when the marked keys are all delivered; it reports whether it
// did. Called with mu held.
func (b *Backlog[T]) checkSynced() bool {
	if b.synced || !b.sealed || b.fifo.Marked() > 0 || b.inflight > 0 {
		return false
	}
	b.synced = true
	return true
}

// noteDepth records the pending count for reportDepth. Called with mu held, so that the
// newest change's count is the one left.
func (b *Backlog[T]) noteDepth() {
	if b.opts.Depth != nil {
		b.depth.Store(int64(b.fifo.Len()))
		b.dirty.Store(true)
	}
}

// reportDepth calls opts.Depth with the newest pending count, unless another goroutine is
// reporting: that one reports again once its call returns, with the newest count.
func (b *Backlog[T]) reportDepth() {
	if b.opts.Depth == nil {
		return
	}
	for b.dirty.Load() {
		if !b.reporting.TryLock() {
			return
		}
		if b.dirty.Swap(false) {
			b.opts.Depth(int(b.depth.Load()))
		}
		b.reporting.Unlock()
	}
}

// Drain is the single drain loop: it hands the pending keys, in line order and in
// batches, to consumer (Apply locked, Deliver and Report unlocked). It returns when ctx is
// done (with ctx.Err()) or the backlog is closed (with ErrClosed), after the batch being
// consumed, if any, has been delivered. Only one Drain may run at a time.
func (b *Backlog[T]) Drain(ctx context.Context, consumer Consumer[T]) error {
	// The wake-up on cancellation runs in a goroutine of its own; Drain waits for it, so
	// that nothing of the backlog outlives the drain loop.
	var wake sync.WaitGroup
	wake.Add(1)
	stop := context.AfterFunc(ctx, func() {
		defer wake.Done()
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer func() {
		if stop() {
			wake.Done()
		}
		wake.Wait()
	}()
	b.mu.Lock()
	for {
		for (b.fifo.Len() == 0 || b.pauses > 0) && !b.closed && ctx.Err() == nil {
			b.parked = true
			b.cond.Wait()
			b.parked = false
		}
		if err := ctx.Err(); err != nil {
			b.mu.Unlock()
			return err
		}
		if b.closed {
			b.mu.Unlock()
			return ErrClosed
		}
		b.consumeBatch(consumer, maxBatch)
	}
}

// Consume hands up to maxKeys of the longest-pending keys to consumer on the calling
// goroutine, as one batch of the drain loop (Apply locked, Deliver and Report unlocked),
// and returns how many keys it consumed: 0 when nothing is pending. It waits while a
// Between function runs. It is for owners that drive the backlog step by step, such as
// tests interleaving pushes with consumption; it must not run at the same time as Drain
// or another Consume.
func (b *Backlog[T]) Consume(consumer Consumer[T], maxKeys int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.pauses > 0 {
		b.cond.Wait()
	}
	return b.consumeBatch(consumer, maxKeys)
}

// consumeBatch hands up to maxKeys pending keys to consumer and returns how many it took.
// Called with mu held, and returns with it held; it releases mu while the batch is
// delivered and reported.
func (b *Backlog[T]) consumeBatch(consumer Consumer[T], maxKeys int) int {
	if b.fifo.Len() == 0 {
		return 0
	}
	batch := b.buf[:0]
	n := 0
	for ; n < maxKeys; n++ {
		key, events, marked, ok := b.fifo.Pop(batch)
		if !ok {
			break
		}
		for i := len(batch); i < len(events); i++ {
			events[i].Key = key
		}
		batch = events
		if marked {
			b.inflight++
		}
	}
	b.buf = batch
	b.consuming = true
	out, errs := consumer.Apply(batch)
	b.noteDepth()
	b.mu.Unlock()
	b.reportDepth()
	consumer.Deliver(out)
	clear(b.buf) // drop the batch's objects: the consumer is done with them
	b.mu.Lock()
	b.consuming = false
	if b.pauses > 0 {
		b.idle.Broadcast()
	}
	b.inflight = 0
	if b.checkSynced() && b.opts.OnSynced != nil {
		// Called before the next batch, so that nothing consumed after the sync is
		// mistaken for part of it by what OnSynced starts.
		b.mu.Unlock()
		b.opts.OnSynced()
		b.mu.Lock()
	}
	if len(errs) > 0 {
		b.mu.Unlock()
		consumer.Report(errs)
		b.mu.Lock()
	}
	return n
}

// Between calls fn between two batches: after every event applied has been delivered,
// and before any more is applied. No event is applied or delivered until fn returns; it
// is how a handler added while running receives the current state without missing or
// repeating an event. The backlog is not locked while fn runs, so pushes do not wait for
// it. Functions of concurrent Between calls may run at the same time.
func (b *Backlog[T]) Between(fn func()) {
	b.mu.Lock()
	b.pauses++
	for b.consuming {
		b.idle.Wait()
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.pauses--
		b.cond.Broadcast()
		b.mu.Unlock()
	}()
	fn()
}

// Close stops Drain once the batch being consumed, if any, has been delivered. Events
// pushed afterwards are kept but never drained.
func (b *Backlog[T]) Close() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
}

// Clear drops every pending key and event, so that nothing the backlog held stays
// reachable through it. Marked keys dropped this way never sync.
func (b *Backlog[T]) Clear() {
	b.mu.Lock()
	b.fifo.Clear()
	b.mu.Unlock()
}

// HasSynced reports whether the backlog is sealed and every key pushed before Seal has
// been delivered.
func (b *Backlog[T]) HasSynced() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.synced
}

// Len returns the number of keys with pending events; keys of the batch being consumed
// are no longer pending.
func (b *Backlog[T]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fifo.Len()
}
