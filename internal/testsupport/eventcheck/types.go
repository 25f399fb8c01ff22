package eventcheck

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/typedinformer/typedinformer/event"
)

// Types records the types of the events it handles, per key, for tests that compare what
// a handler saw with go-cmp. It is a controller.Handler; it is safe for concurrent use.
type Types[T event.Object] struct {
	mu    sync.Mutex
	byKey map[string][]string
}

// Handle records e's type under its key.
func (l *Types[T]) Handle(_ context.Context, e event.Event[T]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey == nil {
		l.byKey = map[string][]string{}
	}
	l.byKey[e.Key] = append(l.byKey[e.Key], e.Type.String())
}

// ByKey returns a copy of what was recorded: per key, the event types in order.
func (l *Types[T]) ByKey() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := maps.Clone(l.byKey)
	for k, v := range out {
		out[k] = slices.Clone(v)
	}
	if out == nil {
		out = map[string][]string{}
	}
	return out
}
