// Package eventcheck holds the checking handler the library's own tests share: a handler
// that follows the events it receives with its own map of objects and records every event
// that does not follow from what it knew. The event cache's fuzz test, the controller's
// fault matrix and the end-to-end tests all judge delivery with it.
package eventcheck

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/typedinformer/typedinformer/event"
)

// Step is one event a Checker received, numbered in the order received (from 1).
type Step[T event.Object] struct {
	// Seq numbers the event among all the Checker received, from 1.
	Seq int
	// Event is the event as received.
	Event event.Event[T]
}

// Checker is a controller.Handler and an eventcache.Sink that keeps its own map of the
// objects its events add up to and checks every event against it:
//
//   - Added only for a key it does not know, without a prior;
//   - Modified and Deleted only for a key it knows, with a Prior of the same resource
//     version and UID as the state it last saw;
//   - a final-state-unknown deletion carries that last state;
//   - resource versions of a key never go backwards, across deletions and re-creations
//     too (etcd revisions only grow); versions that are not integers are not compared.
//
// It follows the events after a problem too, so that one problem is reported once. It is
// safe for concurrent use.
type Checker[T event.Object] struct {
	name string

	mu       sync.Mutex
	known    map[string]T
	maxRV    map[string]uint64
	history  map[string][]Step[T]
	seq      int
	problems []string
}

// New returns a Checker that knows no object; name labels its reports.
func New[T event.Object](name string) *Checker[T] {
	return &Checker[T]{name: name, known: map[string]T{}, maxRV: map[string]uint64{}, history: map[string][]Step[T]{}}
}

// Name returns the name the Checker was created with.
func (c *Checker[T]) Name() string { return c.name }

// Handle implements controller.Handler: it checks e under the key of its object.
func (c *Checker[T]) Handle(_ context.Context, e event.Event[T]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	var zero T
	if e.Object == zero {
		c.fail("event #%d %v has no object", c.seq, e)
		return
	}
	key, err := event.ObjectKey(e.Object)
	if err != nil {
		c.fail("event #%d %v: %v", c.seq, e, err)
		return
	}
	c.check(key, e)
}

// Deliver implements eventcache.Sink: it checks each event of batch under its Key.
func (c *Checker[T]) Deliver(batch []event.Event[T]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range batch {
		c.seq++
		var zero T
		if e.Object == zero {
			c.fail("%s: event #%d %v has no object", e.Key, c.seq, e)
			continue
		}
		c.check(e.Key, e)
	}
}

func (c *Checker[T]) fail(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// check judges e against what c knows of key, then follows it. Called with mu held.
func (c *Checker[T]) check(key string, e event.Event[T]) {
	last, known := c.known[key]
	switch e.Type {
	case event.Added:
		if known {
			c.fail("%s: %v for a known key (last seen at %s)", key, e, last.GetResourceVersion())
		}
		if e.HasPrior() {
			c.fail("%s: %v carries a prior (%s)", key, e, e.Prior.GetResourceVersion())
		}
	case event.Modified, event.Deleted:
		switch {
		case !known:
			c.fail("%s: %v for an unknown key", key, e)
		case !e.HasPrior():
			c.fail("%s: %v has no prior, last seen %s", key, e, last.GetResourceVersion())
		case e.Prior.GetResourceVersion() != last.GetResourceVersion() || e.Prior.GetUID() != last.GetUID():
			c.fail("%s: %v has prior %s (uid %s), last seen %s (uid %s)", key, e,
				e.Prior.GetResourceVersion(), e.Prior.GetUID(), last.GetResourceVersion(), last.GetUID())
		}
		if e.Type == event.Deleted && e.FinalStateUnknown && known && e.Object.GetResourceVersion() != last.GetResourceVersion() {
			c.fail("%s: %v does not carry the last state seen (%s)", key, e, last.GetResourceVersion())
		}
	default:
		c.fail("%s: event of invalid type %v", key, e.Type)
	}
	if rv, err := strconv.ParseUint(e.Object.GetResourceVersion(), 10, 64); err == nil {
		if rv < c.maxRV[key] {
			c.fail("%s: %v: resource version went back from %d", key, e, c.maxRV[key])
		}
		c.maxRV[key] = max(rv, c.maxRV[key])
	}
	if e.Type == event.Deleted {
		delete(c.known, key)
	} else {
		c.known[key] = e.Object
	}
	c.history[key] = append(c.history[key], Step[T]{Seq: c.seq, Event: e})
}

// Problems returns a description of every inconsistent event so far, in order.
func (c *Checker[T]) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.problems...)
}

// Verify fails t with every problem seen (the first 20, and how many more).
func (c *Checker[T]) Verify(t testing.TB) {
	t.Helper()
	for i, p := range c.Problems() {
		if i == 20 {
			t.Errorf("handler %s: ... and %d more problems", c.name, len(c.problems)-i)
			break
		}
		t.Errorf("handler %s: inconsistent event: %s", c.name, p)
	}
}

// Known returns a copy of the objects the events add up to, by key.
func (c *Checker[T]) Known() map[string]T {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]T, len(c.known))
	for k, o := range c.known {
		out[k] = o
	}
	return out
}

// Versions returns the resource versions of the objects the events add up to, by key:
// the form in which tests compare it with a server's list.
func (c *Checker[T]) Versions() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.known))
	for k, o := range c.known {
		out[k] = o.GetResourceVersion()
	}
	return out
}

// Count returns the number of events received so far.
func (c *Checker[T]) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// Events returns key's events, oldest first, with their numbers.
func (c *Checker[T]) Events(key string) []Step[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Step[T](nil), c.history[key]...)
}

// EventsSince returns key's events numbered after seq, oldest first.
func (c *Checker[T]) EventsSince(key string, seq int) []event.Event[T] {
	var out []event.Event[T]
	for _, s := range c.Events(key) {
		if s.Seq > seq {
			out = append(out, s.Event)
		}
	}
	return out
}

// IncarnationMerges returns the modifications whose prior has another UID than their
// object: a deletion and a re-creation delivered as one modification.
func (c *Checker[T]) IncarnationMerges() []event.Event[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []event.Event[T]
	for _, steps := range c.history {
		for _, s := range steps {
			if s.Event.Type == event.Modified && s.Event.Prior.GetUID() != s.Event.Object.GetUID() {
				out = append(out, s.Event)
			}
		}
	}
	return out
}
