package queue

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
)

// maxInbox is the number of events past which a push sorts the inbox by key itself, when
// no drain loop will (none runs, or Between holds it off): it bounds the memory of such a
// backlog by the number of keys, as compression promises. It is small enough that the
// inbox's array, which a backlog keeps for reuse, stays small.
const maxInbox = 1024

// maxInboxDraining is maxInbox, with BacklogOptions.SortInDrain, while a drain loop runs
// and is not held off: the drain loop sorts the whole inbox before its next batch, and a
// pusher that sorted instead would do the per-key work on its own goroutine (the
// reflector's, which reads the watch) while the drain loop waits for the lock, where the
// two can run side by side. A drain loop that falls far behind, or is stuck in a
// consumer's callback, still leaves the pushers to sort past this many events.
const maxInboxDraining = 16 * maxInbox

// maxBatch is the most keys Drain takes per lock acquisition. A batch amortises the lock,
// the wake-up and the consumer's own per-call costs over many keys while the producer
// runs ahead; it is small enough that Apply, which runs with the backlog locked, holds
// producers up for little longer than one key would.
const maxBatch = 128

// Consumer receives a Backlog's keys from its drain loop, a batch at a time. Each event
// of a batch carries its key in Event.Key; a batch holds every pending event of each of
// its keys, oldest first and grouped by key, keys in line order. The event cache's
// ResourceTrackingConsumer and every handler's runner are Consumers.
//
// Apply runs with the backlog's pending events locked, so that whoever changes the
// backlog through Update sees what Apply changed and the pending events as one consistent
// state (pushes do not wait for it); it returns the events to deliver (it may rewrite events in place, drop some, or return a new slice)
// and the errors to report. Deliver runs with nothing locked, so that producers never
// wait for it. Report, when Apply returned errors, runs after Deliver, with nothing
// locked and once the batch no longer counts as being consumed, so that it may call
// Between. Every Apply is followed by exactly one Deliver before the next Apply.
type Consumer[T event.Object] interface {
	Apply(batch []event.Event[T]) ([]event.Event[T], []error)
	Deliver(batch []event.Event[T])
	Report(errs []error)
}

// EntryConsumer is a Consumer that, drained from a Backlog with an Index, takes each batch
// with the entries of its keys, so that it finds what it keeps for a key without a lookup
// of its own: entries[i] is the entry of the batch's i-th key (a batch holds each key
// once, with its events together). ApplyEntries is then called instead of Apply, with
// the same locking and the same results.
type EntryConsumer[T event.Object] interface {
	Consumer[T]
	ApplyEntries(batch []event.Event[T], entries []*Entry[T]) ([]event.Event[T], []error)
}

// BacklogOptions configure a Backlog.
type BacklogOptions[T event.Object] struct {
	// Compression selects the compression rules; Compress by default.
	Compression Compression
	// Known reports whether the consumer knows key before first, the first event of a
	// newly pending key. It is asked at most once per pending key, and only when a
	// compression rule depends on the answer. When nil, an addition means the key was not
	// known and anything else that it was, which fits consumers whose events are already
	// resolved against what they know, such as a handler's.
	Known func(key string, first event.Event[T]) bool
	// Key computes the key of an event pushed with an empty Event.Key, on the goroutine
	// that sorts the inbox (normally the drain loop), with the backlog locked: this is
	// where the event cache builds its default keys (see the package doc). Pushers that
	// always set the key need none.
	Key func(obj T) string
	// Index, when set, holds the backlog's entries: its owner keeps one entry per key for
	// the pending events and its own object for the key (see Index), where the backlog
	// would otherwise keep a map of its own, so that an event costs one lookup of its key.
	// The event cache keeps the known objects there. With an Index, Known and Key are not
	// used.
	Index Index[T]
	// SortInDrain leaves the sorting of pushed events to a running drain loop until
	// maxInboxDraining (16,384) events wait, rather than maxInbox (1,024), so that a
	// pusher that must get back to its own input quickly (the reflector, which reads the
	// watch) does not do the per-key work itself. While no drain loop runs, or Between
	// holds it off, pushers sort past maxInbox events either way.
	SortInDrain bool
	// OnSynced, when set, is called once, with nothing locked, when the backlog has
	// synced (see Backlog.HasSynced). It runs on the goroutine that made it so, before
	// that goroutine consumes anything more.
	OnSynced func()
	// Depth, when set, is called with the number of pending keys after changes, with
	// nothing locked of the backlog; events pushed count once the drain loop has sorted
	// them by key, before its next batch. Calls are serialised and never report a depth older
	// than one already reported; changes that race with a call are reported by one more
	// call after it, with the newest depth, so the last call reports the current depth.
	// Depth may change the backlog (a change it makes is reported after it returns). A
	// panic in it is recovered and logged as an error.
	Depth func(pendingKeys int)
	// OnApplied, when set, turns on the applied watermark (see Backlog.Applied) and is
	// called, with nothing locked, after it may have changed: read it with Applied.
	// Calls may come from several goroutines at once.
	OnApplied func()
}

// Backlog is the pipeline's one keyed-backlog stage: pending events per key (keys in the
// order each first became pending, with the compression rules), a single drain loop that hands them to a Consumer in
// batches, initial-sync tracking, and pauses between batches for callers of Between. The
// event cache drains its Backlog into the consumer that keeps the known objects; every
// handler drains its own into the handler. All methods are safe for concurrent use.
//
// Initial-sync tracking: every event pushed before Seal, by any of Push, PushBatch and
// Update, belongs to the initial state; the backlog has synced once it is sealed and
// every key of the initial state has been delivered. The backlog keeps that mark itself:
// no caller passes it.
//
// Pushes only append to an inbox, under a lock of its own held for the append alone. The
// drain loop sorts the inbox into the pending events (computing missing keys, applying
// the compression rules) under their lock before it takes each batch, so a pusher, such
// as the reflector reading a watch, neither does per-key work nor waits for it. Whoever
// needs the pending events exact (Update, Len, Seal) sorts the inbox first, and so does a
// pusher that finds it full: it never holds more than maxInbox events and one push, which
// keeps memory bounded by keys while the drain loop is held off.
type Backlog[T event.Object] struct {
	opts BacklogOptions[T]

	// fifoMu guards the FIFO and the sync state. The drain loop holds it while it sorts
	// the inbox and applies a batch. Lock order: fifoMu, then mu.
	fifoMu   sync.Mutex
	fifo     *fifo[T]
	spare    []event.Event[T] // the previous inbox's array, for reuse
	inflight int              // marked keys in the batch being consumed
	buf      []event.Event[T]
	synced   atomic.Bool
	queued   atomic.Int64 // fifo.Len(), for the drain loop's wait under mu

	// mu guards the inbox and the drain loop's coordination. cond wakes the drain loop
	// (something is pushed, the backlog closed, a Between ended); idle wakes Between (no
	// batch is being consumed any more).
	mu          sync.Mutex
	cond        sync.Cond
	idle        sync.Cond
	inbox       []event.Event[T] // pushed and not yet sorted, oldest first
	inboxMarked int              // the first inboxMarked events of inbox were pushed before Seal
	inboxRV     uint64           // the newest resource version given to Progress, not yet sorted
	sealed      bool             // written with both locks held
	closed      bool
	parked      bool // the drain loop waits on cond: only then does a push signal it
	draining    bool // a Drain loop runs (see maxInboxDraining)
	consuming   bool // a batch is between its Apply and the end of its Deliver
	pauses      int  // Between calls waiting or running: the drain loop holds off

	// Depth reporting: depth is the newest pending count, written with fifoMu held; dirty
	// says it has not been reported; reporting serialises the calls of opts.Depth.
	depth     atomic.Int64
	dirty     atomic.Bool
	reporting sync.Mutex

	// The applied watermark, with OnApplied: applied is the fifo's, stored with fifoMu
	// held; unordered is set for good by a resource version that is not an integer;
	// appliedDirty says OnApplied has not been called since either changed.
	applied      atomic.Uint64
	unordered    atomic.Bool
	appliedDirty atomic.Bool
}

// NewBacklog returns an empty, unsealed Backlog.
func NewBacklog[T event.Object](opts BacklogOptions[T]) *Backlog[T] {
	if opts.Known == nil {
		opts.Known = knownFromFirstEvent[T]
	}
	b := &Backlog[T]{fifo: newFIFO(opts.Compression, opts.Known), opts: opts}
	if opts.Index != nil {
		b.fifo = newIndexedFIFO(opts.Compression, opts.Index)
	}
	b.cond.L = &b.mu
	b.idle.L = &b.mu
	return b
}

// Push adds e to the pending events of its Event.Key; with an empty key,
// BacklogOptions.Key computes it when the event is sorted. It never waits for the
// consumer.
func (b *Backlog[T]) Push(e event.Event[T]) {
	b.mu.Lock()
	b.inbox = append(b.inbox, e)
	b.pushed()
}

// PushBatch adds every event of batch, each as Push does, in order, with one lock
// acquisition. It never waits for the consumer.
func (b *Backlog[T]) PushBatch(batch []event.Event[T]) {
	b.mu.Lock()
	b.inbox = append(b.inbox, batch...)
	b.pushed()
}

// pushed finishes a push: it marks what was pushed before Seal, wakes the drain loop if
// it is parked, and sorts a full inbox. Called with mu held; it unlocks.
func (b *Backlog[T]) pushed() {
	if !b.sealed {
		b.inboxMarked = len(b.inbox)
	}
	if b.parked {
		b.cond.Signal()
	}
	full := len(b.inbox) >= maxInbox
	if full && b.opts.SortInDrain && b.draining && b.pauses == 0 && !b.closed {
		full = len(b.inbox) >= maxInboxDraining
	}
	b.mu.Unlock()
	if full {
		b.fifoMu.Lock()
		b.sort()
		b.fifoMu.Unlock()
		b.report()
	}
}

// sort moves the inbox into the FIFO. Called with fifoMu held, and not mu.
func (b *Backlog[T]) sort() {
	b.mu.Lock()
	in, marked := b.inbox, b.inboxMarked
	b.inbox, b.inboxMarked, b.spare = b.spare, 0, nil
	// The events leave the inbox for the FIFO in one step as the drain loop sees them
	// (under mu): it must never find both empty meanwhile and park with work pending.
	// fifoChanged stores the exact length once they are sorted.
	b.queued.Add(int64(len(in)))
	progress := b.inboxRV
	b.inboxRV = 0
	b.mu.Unlock()
	if len(in) == 0 {
		b.spare = in
		if progress > 0 {
			b.fifo.rv = max(b.fifo.rv, progress)
			b.fifoChanged()
		}
		return
	}
	track := b.opts.OnApplied != nil
	var zero T
	index := b.opts.Index
	for i, e := range in {
		switch {
		case index != nil:
			var en *Entry[T]
			if e.Key == "" {
				en = index.EntryOf(e.Object)
			} else {
				en = index.Entry(e.Key)
			}
			e.Key = en.key
			b.fifo.PushEntry(en, e, i < marked)
		case e.Key == "":
			e.Key = b.opts.Key(e.Object)
			fallthrough
		default:
			b.fifo.Push(e.Key, e, i < marked)
		}
		if track && !e.Sync && e.Object != zero {
			// After the push: the key became pending before its own event counts as sorted.
			b.fifo.rv = max(b.fifo.rv, b.parseRV(e.Object.GetResourceVersion()))
		}
	}
	b.fifo.rv = max(b.fifo.rv, progress)
	clear(in) // drop the objects: the FIFO holds what it keeps
	if cap(in) <= 2*maxInbox || b.opts.SortInDrain && cap(in) <= maxInboxDraining {
		// A push overshoots its bound by at most one batch; an array larger than that came
		// from a burst (a huge PushBatch) and is not kept.
		b.spare = in[:0]
	}
	b.fifoChanged()
}

// fifoChanged records the FIFO's new length and watermark. Called with fifoMu held.
func (b *Backlog[T]) fifoChanged() {
	b.queued.Store(int64(b.fifo.Len()))
	if b.opts.Depth != nil {
		b.depth.Store(int64(b.fifo.Len()))
		b.dirty.Store(true)
	}
	if b.opts.OnApplied != nil {
		if w := b.fifo.watermark(); b.applied.Swap(w) != w {
			b.appliedDirty.Store(true)
		}
	}
}

// parseRV returns rv as an integer, or 0, marking the backlog unordered, when it is not
// one. An empty rv (an object whose Transform dropped it) is 0 and orders nothing.
func (b *Backlog[T]) parseRV(rv string) uint64 {
	if rv == "" {
		return 0
	}
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil && !b.unordered.Swap(true) {
		b.appliedDirty.Store(true)
	}
	return v
}

// Applied returns the applied watermark, tracked when BacklogOptions.OnApplied is set:
// every event pushed with a resource version up to rv, and every event pushed before a
// Progress or a Pending.Listed up to rv, has been consumed (Consumer.Apply has returned) or
// dropped by compression. Keys are served in the order they became pending, not in
// resource-version order, so it is the resource version sorted when the key now pending
// longest became pending (or the newest sorted when none is), not that of the last event
// applied. It can go down: a relist's resource version replaces it. ordered is false once
// an event, Progress or list carried a resource version that is not a decimal integer
// below 2^64, for good: such versions cannot be compared.
func (b *Backlog[T]) Applied() (rv uint64, ordered bool) {
	return b.applied.Load(), !b.unordered.Load()
}

// Progress records that every event up to resourceVersion has been pushed, as a watch
// bookmark says: once the events pushed before it are consumed, Applied reaches it.
// It never waits for the consumer.
func (b *Backlog[T]) Progress(resourceVersion string) {
	v := b.parseRV(resourceVersion)
	b.mu.Lock()
	b.inboxRV = max(b.inboxRV, v)
	b.pushed()
}

// Update calls fn with the backlog locked, holding every event pushed so far, for
// changes that must be atomic with respect to the consumer's Apply: a relist that reads
// the consumer's known objects and the pending events, and pushes many keys at once, or
// a new handler's initial state. fn reads and pushes through p, which is valid only
// while fn runs; what fn pushes before Seal belongs to the initial state, as with Push.
// fn must not call the Backlog.
func (b *Backlog[T]) Update(fn func(p Pending[T])) {
	b.fifoMu.Lock()
	b.sort()
	fn(Pending[T]{b: b})
	b.fifoChanged()
	syncedNow := b.checkSynced()
	b.fifoMu.Unlock()
	b.wake()
	b.callbacks(syncedNow)
}

// Pending is a Backlog's pending events as Update's function sees them: locked, and
// consistent with what the consumer's Apply has changed. It reads them and pushes whole
// events, each under its Event.Key. It is valid only while that function runs.
type Pending[T event.Object] struct{ b *Backlog[T] }

// Len returns the number of keys with pending events.
func (p Pending[T]) Len() int { return p.b.fifo.Len() }

// Events returns key's pending events, oldest first, or nil when nothing is pending for
// key. The slice is the backlog's own: it must not be changed, and is valid until the
// next Push.
func (p Pending[T]) Events(key string) []event.Event[T] {
	if q := p.b.fifo.Pending(key); q != nil {
		return q.Events()
	}
	return nil
}

// Range calls fn with each pending key and its events, in line order, until fn returns
// false. fn must not push, nor change the events.
func (p Pending[T]) Range(fn func(key string, events []event.Event[T]) bool) {
	p.b.fifo.Range(func(key string, q *eventQueue[T]) bool { return fn(key, q.Events()) })
}

// Push adds e to the pending events of its Event.Key, applying the compression rules at
// once. The key is taken as it is: BacklogOptions.Key computes none here.
func (p Pending[T]) Push(e event.Event[T]) { p.b.fifo.Push(e.Key, e, !p.b.sealed) }

// Listed records that the pending events and what the consumer holds are now a list taken
// at resourceVersion, with the events pushed since: Applied reaches it, lower or not, once
// the keys pending now are consumed. A relist (eventcache's Replace) calls it after its
// pushes.
func (p Pending[T]) Listed(resourceVersion string) {
	if p.b.opts.OnApplied != nil && resourceVersion != "" {
		p.b.fifo.listed(p.b.parseRV(resourceVersion))
	}
}

// Grow makes room for n more pending keys, so that a burst such as a relist does not
// grow the backlog's map step by step.
func (p Pending[T]) Grow(n int) { p.b.fifo.Grow(n) }

// Seal ends the initial state: events pushed from now on are not part of it, and the
// backlog syncs once the keys of the initial state are delivered. Seal is idempotent.
func (b *Backlog[T]) Seal() {
	b.fifoMu.Lock()
	b.mu.Lock()
	b.sealed = true
	b.mu.Unlock()
	b.sort() // events of the initial state may have cancelled out: only the FIFO can tell
	syncedNow := b.checkSynced()
	b.fifoMu.Unlock()
	b.callbacks(syncedNow)
}

// wake signals the drain loop if it is parked and something is pending.
func (b *Backlog[T]) wake() {
	b.mu.Lock()
	if b.parked && b.pendingLocked() {
		b.cond.Signal()
	}
	b.mu.Unlock()
}

// checkSynced flips synced when the backlog is sealed and the marked keys are all
// delivered; it reports whether it did. Called with fifoMu held, after a sort.
func (b *Backlog[T]) checkSynced() bool {
	if b.synced.Load() || !b.sealed || b.fifo.Marked() > 0 || b.inflight > 0 {
		return false
	}
	b.mu.Lock()
	marked := b.inboxMarked
	b.mu.Unlock()
	if marked > 0 {
		return false
	}
	b.synced.Store(true)
	return true
}

// callbacks runs, with nothing locked, what a change calls for.
func (b *Backlog[T]) callbacks(syncedNow bool) {
	if syncedNow && b.opts.OnSynced != nil {
		b.opts.OnSynced()
	}
	b.report()
}

// report calls opts.OnApplied if the watermark changed, and opts.Depth with the
// newest pending count, unless another goroutine is reporting: that one reports again once
// its call returns, with the newest count.
func (b *Backlog[T]) report() {
	if b.appliedDirty.Load() && b.appliedDirty.Swap(false) {
		b.opts.OnApplied()
	}
	if b.opts.Depth == nil {
		return
	}
	for b.dirty.Load() {
		if !b.reporting.TryLock() {
			return
		}
		if b.dirty.Swap(false) {
			b.callDepth(int(b.depth.Load()))
		}
		b.reporting.Unlock()
	}
}

// callDepth calls opts.Depth, recovering and logging a panic in it: it is user code (a
// metrics adapter) run on the drain loop's and the pushers' goroutines, where a panic
// would end the process.
func (b *Backlog[T]) callDepth(n int) {
	defer func() { // on every push: nothing is built unless it panicked
		if v := recover(); v != nil {
			guard.Logged(klog.Background(), v, nil, "Depth panicked", "pendingKeys", n)
		}
	}()
	b.opts.Depth(n)
}

// Drain is the single drain loop: it hands the pending keys, in line order and in
// batches, to consumer (Apply with the pending events locked, Deliver and Report
// unlocked). It returns when ctx is done (with ctx.Err()) or the backlog is closed (with
// ErrClosed), after the batch being consumed, if any, has been delivered. Only one Drain
// may run at a time.
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
	b.draining = true
	defer func() {
		b.mu.Lock()
		b.draining = false
		b.mu.Unlock()
	}()
	for {
		for (!b.pendingLocked() || b.pauses > 0) && !b.closed && ctx.Err() == nil {
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
// goroutine, as one batch of the drain loop (Apply with the pending events locked,
// Deliver and Report unlocked), and returns how many keys it consumed: 0 when nothing is
// pending. It waits while a Between function runs. It is for owners that drive the
// backlog step by step, such as tests interleaving pushes with consumption; it must not
// run at the same time as Drain or another Consume.
func (b *Backlog[T]) Consume(consumer Consumer[T], maxKeys int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.pauses > 0 {
		b.cond.Wait()
	}
	return b.consumeBatch(consumer, maxKeys)
}

// consumeBatch hands up to maxKeys pending keys to consumer and returns how many it took.
// Called with mu held and no pause; it returns with mu held, having released it while
// the batch was sorted, applied, delivered and reported.
func (b *Backlog[T]) consumeBatch(consumer Consumer[T], maxKeys int) int {
	b.consuming = true
	b.mu.Unlock()

	b.fifoMu.Lock()
	b.sort()
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
	var out []event.Event[T]
	var errs []error
	if n > 0 {
		if ec, ok := consumer.(EntryConsumer[T]); ok && b.opts.Index != nil {
			out, errs = ec.ApplyEntries(batch, b.fifo.retiring)
		} else {
			out, errs = consumer.Apply(batch)
		}
		if b.opts.Index != nil {
			b.fifo.releaseRetiring()
		}
		b.fifoChanged()
	}
	b.fifoMu.Unlock()

	b.report()
	if n > 0 {
		consumer.Deliver(out)
	}
	clear(b.buf) // drop the batch's objects: the consumer is done with them

	b.fifoMu.Lock()
	b.inflight = 0
	syncedNow := b.checkSynced()
	b.fifoMu.Unlock()

	b.mu.Lock()
	b.consuming = false
	if b.pauses > 0 {
		b.idle.Broadcast()
	}
	if syncedNow && b.opts.OnSynced != nil {
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
// reachable through it. Keys of the initial state dropped this way never sync.
func (b *Backlog[T]) Clear() {
	b.fifoMu.Lock()
	b.mu.Lock()
	b.inbox, b.inboxMarked = nil, 0
	b.mu.Unlock()
	b.fifo.Clear()
	b.spare = nil
	b.fifoChanged()
	b.fifoMu.Unlock()
	b.report()
}

// HasSynced reports whether the backlog is sealed and every key pushed before Seal has
// been delivered.
func (b *Backlog[T]) HasSynced() bool { return b.synced.Load() }

// Len returns the number of keys with pending events; keys of the batch being consumed
// are no longer pending.
func (b *Backlog[T]) Len() int {
	b.fifoMu.Lock()
	b.sort()
	n := b.fifo.Len()
	b.fifoMu.Unlock()
	b.report()
	return n
}

// pendingLocked reports whether anything is pushed and not consumed. Called with mu held.
func (b *Backlog[T]) pendingLocked() bool {
	return len(b.inbox) > 0 || b.queued.Load() > 0 || b.inboxRV > 0
}
