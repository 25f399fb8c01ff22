package typed

import (
	"context"
	"fmt"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
)

// Parts is implemented by a Source whose keys are held in parts that come and go, such
// as the shards a replica holds (package typed/shard): one Loop then reconciles the
// keys of every part held, with one queue and one set of workers, and each part's keys
// are reconciled under that part's context.
type Parts[T event.Object] interface {
	// Part returns the context of the part that holds key, whose object is obj (the
	// cached one, or a deletion's last known state; the zero T when the Loop knows
	// neither), and true while that part is held or being handed over (see HandOver).
	// The context ends when the part is given up, which interrupts the part's
	// reconciles. A key of a part given up is not reconciled by the workers: a live key
	// is dropped, as the part's next holder reconciles it, and a deletion keeps its last
	// state for HandOver. A key that no part holds is dropped, its last state too. Part
	// is called with the Loop's lock held: it must not call the Loop.
	Part(key string, obj T) (ctx context.Context, held bool)
}

// enter checks, for a worker about to reconcile req, that a part holds its key, and
// marks the key active in that part; it returns the part's context, or false when no
// part holds the key, having dropped a live key (and a deletion's last state, unless a
// hand-over is to reconcile it).
func (l *Loop[T]) enter(run *loopRun[T], req Request[T]) (context.Context, bool) {
	obj := req.Object
	if req.Deleted {
		obj = req.LastKnown
	}
	l.mu.Lock()
	// Under the Loop's lock, so that Forget, which comes once Part no longer holds a
	// part, finds every last state kept for that part.
	part, held := l.parts.Part(req.Key, obj)
	if held && part.Err() == nil {
		// A HandOver waits for the keys marked active in its part. The part's context
		// ends before HandOver starts: a key of an ended part is never started.
		run.active[req.Key] = part
		l.mu.Unlock()
		return part, true
	}
	if req.Deleted && !held {
		delete(run.tombstones, req.Key)
	}
	l.mu.Unlock()
	l.forgetFailures(run, req.Key)
	return nil, false
}

// leave marks key's reconcile ended, waking the hand-overs waiting for it.
func (l *Loop[T]) leave(run *loopRun[T], key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(run.active, key)
	close(run.reconciled)
	run.reconciled = make(chan struct{})
}

// HandOver finishes the Loop's work on a part of its Source (see Parts) that was just
// given up, while held lasts: part is the context Part gives for the part's keys, which
// has ended, and mine tells the part's deletions from the others'. The part's next
// holder reconciles every live key its cache lists, but cannot know of the deletions
// this Loop has seen and not yet reconciled, so HandOver:
//
//   - waits for the part's reconciles in flight (their context, part's, has ended);
//   - then reconciles once each deletion of the part whose last state the Loop holds,
//     and each the Source delivers meanwhile, with that state and a context derived
//     from held, taking the workers' slots (at most Options.Workers reconciles at once
//     in all); a key whose object exists again is not reconciled, and one that fails,
//     panics or asks to be requeued is reported wrapping ErrHandedOver and not retried.
//
// It returns once a round finds no deletion of the part left, or once held ends. The
// part's live keys still queued are dropped when a worker takes them. Once Part no
// longer holds the part, call Forget(mine) to drop what is left of it. HandOver returns
// at once if the Loop does not run: Run's end dropped everything. Nil arguments, and a
// nil Loop or one not made by NewLoop, are errors wrapping controller.ErrNilArgument.
func (l *Loop[T]) HandOver(part, held context.Context, mine func(key string, last T) bool) error {
	switch err := l.made(); {
	case err != nil:
		return err
	case part == nil || held == nil:
		return fmt.Errorf("%w: HandOver's part or held context", controller.ErrNilArgument)
	case mine == nil:
		return fmt.Errorf("%w: HandOver's selector of the part's deletions", controller.ErrNilArgument)
	}
	l.mu.Lock()
	run := l.run
	for run != nil && held.Err() == nil && run.activeInLocked(part) {
		reconciled := run.reconciled
		l.mu.Unlock()
		select {
		case <-reconciled:
		case <-held.Done():
		}
		l.mu.Lock()
	}
	l.mu.Unlock()
	if run != nil {
		l.reconcileDeletions(held, run, mine)
	}
	return nil
}

// Forget drops the last states of the deletions mine selects: those of a part that
// Part no longer holds, once HandOver has reconciled what it could.
func (l *Loop[T]) Forget(mine func(key string, last T) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run == nil || mine == nil {
		return
	}
	for key, last := range l.run.tombstones {
		if mine(key, last) {
			delete(l.run.tombstones, key)
		}
	}
}

// activeInLocked reports whether a key of part is being reconciled. Called with
// Loop.mu held.
func (run *loopRun[T]) activeInLocked(part context.Context) bool {
	for _, p := range run.active {
		if p == part {
			return true
		}
	}
	return false
}

// QueuedKeys returns the keys queued, not counting those being reconciled: a copy,
// taken under the queue's lock, for a gauge reported now and then (how many keys of
// each part wait) to sort out without holding up the workers.
func (l *Loop[T]) QueuedKeys() []string {
	l.mu.Lock()
	run := l.run
	l.mu.Unlock()
	if run == nil {
		return nil
	}
	return run.q.Keys()
}
