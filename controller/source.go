package controller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/reflect"
)

// Get returns the known object of key, as Store().Get does. With AddHandler it makes a
// Controller a source of events and objects by key, what a reconcile loop consumes
// (typed.Source).
func (c *Controller[T, L]) Get(key string) (T, bool) { return c.writer.Store().Get(key) }

// Join returns one Registration for a handler registered with several controllers, such
// as one per namespace of a cache read as one: it has synced once every one of regs has,
// its Pending is their sum, and its first Remove removes them all and then calls
// onRemove, when not nil. With no regs it has synced at once. Nil elements are skipped.
func Join(regs []*Registration, onRemove func()) *Registration {
	var all []*Registration
	for _, r := range regs {
		if r != nil {
			all = append(all, r)
		}
	}
	synced := make(chan struct{})
	removed := make(chan struct{})
	j := &Registration{
		synced: synced,
		pending: func() int {
			n := 0
			for _, r := range all {
				n += r.Pending()
			}
			return n
		},
		remove: func() {
			close(removed)
			for _, r := range all {
				r.Remove()
			}
			if onRemove != nil {
				onRemove()
			}
		},
	}
	var waiting []*Registration
	for _, r := range all {
		if !r.HasSynced() {
			waiting = append(waiting, r)
		}
	}
	if len(waiting) == 0 {
		close(synced)
		return j
	}
	// A goroutine waits for the others, and ends when the join is removed: a
	// registration removed before it synced never syncs (see Synced).
	go func() {
		for _, r := range waiting {
			select {
			case <-r.synced:
			case <-removed:
				return
			}
		}
		close(synced)
	}()
	return j
}

// NewRegistration returns the Registration of a handler registered with a source of
// one's own (a typed.Source that is not a Controller): it has synced once synced is
// closed (never, for a nil channel), Pending calls pending (0 when nil), and the first
// Remove calls remove (when not nil). Join builds one from others.
func NewRegistration(synced <-chan struct{}, pending func() int, remove func()) *Registration {
	if pending == nil {
		pending = func() int { return 0 }
	}
	if remove == nil {
		remove = func() {}
	}
	return &Registration{synced: synced, pending: pending, remove: remove}
}

// Applied returns how far the controller's store has applied the server's changes (see
// eventcache.EventQueueCollection.Applied).
func (c *Controller[T, L]) Applied() (rv uint64, ok bool) { return c.collection.Applied() }

// NotifyApplied calls fn once Applied reaches rv or stops being ok (see
// eventcache.EventQueueCollection.NotifyApplied).
func (c *Controller[T, L]) NotifyApplied(rv uint64, fn func()) (stop func() bool, reached bool) {
	return c.collection.NotifyApplied(rv, fn)
}

// HoldsUID reports whether the store holds the object namespace/name with uid.
func (c *Controller[T, L]) HoldsUID(namespace, name string, uid types.UID) bool {
	obj, ok := c.writer.Store().GetByName(namespace, name)
	return ok && obj.GetUID() == uid
}

// Selects reports whether the controller's selectors let obj through (see
// reflect.Reflector.Selects).
func (c *Controller[T, L]) Selects(obj metav1.Object) bool { return c.reflector.Selects(obj) }

// Watermarks returns the controller itself: one cache, whatever the namespace.
func (c *Controller[T, L]) Watermarks(string) []eventcache.Watermarked {
	return []eventcache.Watermarked{c}
}

// RequestProgress asks the controller's reflector for a bookmark, so that Applied catches
// up with the server although nothing the controller watches changes (see
// reflect.Reflector.RequestProgress). A reconcile loop waiting past its bound on this
// cache calls it.
func (c *Controller[T, L]) RequestProgress() { c.reflector.RequestProgress() }

// RequestRelist asks the controller's reflector for a consistent relist, after which
// Applied is at least that list's resource version (see reflect.Reflector.RequestRelist).
// A reconcile loop whose key still waits on this cache after asking for a bookmark calls
// it.
func (c *Controller[T, L]) RequestRelist() { c.reflector.RequestRelist() }

// Fence waits until the controller's store is at least as new as a consistent read taken
// when it is called: it then holds every write committed before the call (the last
// writes of a replica that held the keys before this one). The watch usually carries no
// event up to the read's resource version (it is the server's, across all kinds), so
// Fence asks for a bookmark (RequestProgress) when the store is behind it, and, when two
// bookmarks have not come, for a consistent relist (reflect.Reflector.RequestRelist). It returns
// ctx's error if ctx ends first, and the read's error if the read fails; a store whose
// versions cannot be compared, or that has stopped, is not waited for, nor is one of a
// resource the server does not serve (reflect.IsResourceNotServed).
func (c *Controller[T, L]) Fence(ctx context.Context) error {
	rv, err := c.reflector.ConsistentRV(ctx)
	if reflect.IsResourceNotServed(err) {
		return nil // no object to read stale; its return relists the cache
	}
	if err != nil {
		return fmt.Errorf("fence of %q: %w", c.cfg.name, err)
	}
	target, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return nil // an opaque version orders nothing
	}
	reached := make(chan struct{})
	stop, already := c.NotifyApplied(target, func() { close(reached) })
	if already {
		return nil
	}
	defer stop()
	for attempt := 1; ; attempt++ {
		if attempt%3 == 0 {
			// Two bookmarks asked for did not come (a server that registered the watch
			// too late to send one, or one without a watch cache): a consistent relist
			// reaches the read whatever the server sends.
			c.RequestRelist()
		} else {
			c.RequestProgress()
		}
		t := time.NewTimer(fenceProgressRetry)
		select {
		case <-reached:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// fenceProgressRetry is how long Fence waits for a bookmark before it asks for another,
// and every third time for a relist instead.
const fenceProgressRetry = 5 * time.Second
