// Package watchtap passes a watch's events through a function of the test's before they
// are delivered: to note when each arrives, or to hold them back as a slow connection
// would. Unlike apimachinery's watch.Filter, a tapped watch that is stopped while an event
// waits to be read leaves no goroutine behind.
package watchtap

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// Tap returns w with before called on each event, in order, before it is delivered.
// before may block; stopped is closed when the returned watch is stopped, and before
// should return then.
func Tap(w watch.Interface, before func(e watch.Event, stopped <-chan struct{})) watch.Interface {
	t := &tapped{in: w, out: make(chan watch.Event), stopped: make(chan struct{})}
	go t.loop(before)
	return t
}

type tapped struct {
	in      watch.Interface
	out     chan watch.Event
	stopped chan struct{}
	once    sync.Once
}

func (t *tapped) ResultChan() <-chan watch.Event { return t.out }

func (t *tapped) Stop() {
	t.once.Do(func() { close(t.stopped) })
	t.in.Stop()
}

func (t *tapped) loop(before func(watch.Event, <-chan struct{})) {
	defer close(t.out)
	for e := range t.in.ResultChan() {
		before(e, t.stopped)
		select {
		case t.out <- e:
		case <-t.stopped:
			return
		}
	}
}
