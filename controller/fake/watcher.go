package fake

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// watcher is one open watch. The fake pushes events into an unbounded queue under its own
// lock, and a goroutine per watcher moves them to the unbuffered result channel, so a
// consumer that stops reading never blocks the fake's writers.
type watcher struct {
	ctx       context.Context
	sel       selector
	bookmarks bool
	timeout   time.Duration
	// remove takes the watcher out of the fake's set of open watches; it is idempotent
	// and takes the fake's lock, so it must not be called with the fake's lock held.
	remove func(*watcher)
	// bookmark queues a bookmark at the fake's current resource version; it takes the
	// fake's lock too.
	bookmark func()

	result   chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when the goroutine has exited
	wake     chan struct{} // capacity 1: "the queue or the ended flag changed"

	mu    sync.Mutex
	queue []watch.Event
	ended bool // no more events are accepted; close after draining the queue
	gone  bool // the goroutine has exited; events are dropped
	held  bool // events stay queued until released (see ListerWatcher.HoldWatches)
}

// bookmarkBeforeTimeout is how long before a watch's timeout kube-apiserver's watch
// cache sends it a bookmark (its cache_watcher's nextBookmarkTime).
const bookmarkBeforeTimeout = 2 * time.Second

func newWatcher(ctx context.Context, sel selector, bookmarks bool, timeout time.Duration, remove func(*watcher)) *watcher {
	return &watcher{
		ctx:       ctx,
		sel:       sel,
		bookmarks: bookmarks,
		timeout:   timeout,
		remove:    remove,
		result:    make(chan watch.Event),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
	}
}

// ResultChan implements watch.Interface.
func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface. It is idempotent, and when it returns the result
// channel is closed and the watcher's goroutine has exited.
func (w *watcher) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// push queues an event without ever blocking for long.
func (w *watcher) push(e watch.Event) {
	w.mu.Lock()
	if w.ended || w.gone {
		w.mu.Unlock()
		return
	}
	w.queue = append(w.queue, e)
	w.mu.Unlock()
	w.signal()
}

// end makes the watch deliver what is queued and then close, as when the server ends a
// watch. It does not call remove, so the fake may call it with its lock held.
func (w *watcher) end() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	w.signal()
}

// hold holds back or releases the queued events.
func (w *watcher) hold(held bool) {
	w.mu.Lock()
	w.held = held
	w.mu.Unlock()
	w.signal()
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// next takes the next queued event; ok is false when the queue is empty, and ended then
// says whether the watch should close.
func (w *watcher) next() (e watch.Event, ok, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held {
		return watch.Event{}, false, false
	}
	if len(w.queue) == 0 {
		return watch.Event{}, false, w.ended
	}
	e = w.queue[0]
	w.queue[0] = watch.Event{} // let the event be collected once delivered
	w.queue = w.queue[1:]
	return e, true, w.ended
}

func (w *watcher) run() {
	defer func() {
		w.mu.Lock()
		w.gone = true
		w.queue = nil
		w.mu.Unlock()
		w.remove(w)
		close(w.result)
		close(w.done)
	}()
	var timeout, early <-chan time.Time
	if w.timeout > 0 {
		t := time.NewTimer(w.timeout)
		defer t.Stop()
		timeout = t.C
	}
	if w.bookmarks && w.bookmark != nil && w.timeout > bookmarkBeforeTimeout {
		// As kube-apiserver's watch cache does: a bookmark shortly before the timeout, so
		// that a client learns how far the watch has sent although nothing changed.
		t := time.NewTimer(w.timeout - bookmarkBeforeTimeout)
		defer t.Stop()
		early = t.C
	}
	// onTimeout ends the watch like the server does when timeoutSeconds elapse.
	onTimeout := func() {
		timeout = nil
		w.end()
		w.remove(w)
	}
	for {
		e, ok, ended := w.next()
		if !ok {
			if ended {
				return
			}
			select {
			case <-w.wake:
			case <-early:
				early = nil
				w.bookmark()
			case <-timeout:
				onTimeout()
			case <-w.stop:
				return
			case <-w.ctx.Done():
				return
			}
			continue
		}
		for sent := false; !sent; {
			select {
			case w.result <- e:
				sent = true
			case <-early:
				early = nil
				w.bookmark()
			case <-timeout:
				onTimeout()
			case <-w.stop:
				return
			case <-w.ctx.Done():
				return
			}
		}
	}
}

// errWatcher is the watch the server returns when it fails a watch after accepting the
// request: one ERROR event carrying the status, then a closed channel.
type errWatcher struct {
	result chan watch.Event
}

func newErrWatcher(err *apierrors.StatusError) *errWatcher {
	status := err.ErrStatus
	w := &errWatcher{result: make(chan watch.Event, 1)}
	w.result <- watch.Event{Type: watch.Error, Object: &status}
	close(w.result)
	return w
}

// ResultChan implements watch.Interface.
func (w *errWatcher) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface; there is nothing to stop.
func (w *errWatcher) Stop() {}
