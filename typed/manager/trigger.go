package manager

import (
	"context"
	"errors"
	"fmt"
	goreflect "reflect"
	"slices"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/typed"
)

// ErrInvalidKey is returned, wrapped, by Enqueue and Loop.Enqueue for a key that names no
// object the Loop reconciles: one without a name, or of a namespace outside the Loop's
// cache.
var ErrInvalidKey = errors.New("invalid key")

// ErrNotInReconcile is returned by Enqueue for a context that is not the context of a
// reconcile of a Loop of a Manager.
var ErrNotInReconcile = errors.New("the context is not a reconcile's")

// Trigger is a source of keys from outside the cluster: a webhook, a message queue, a
// timer. Its function calls enqueue (Loop.Enqueue) for each key to reconcile until ctx
// ends, then returns; a non-nil error stops the Manager, as a runnable's does. See
// Loop.AddTrigger.
type Trigger func(ctx context.Context, enqueue func(key string) error) error

// Channel returns a Trigger of the keys received from keys, until it is closed: each
// reconciles its key, as Loop.Enqueue does; an invalid key is logged and skipped. It is
// read only while its Loop runs (while this replica leads), so a sender waits meanwhile,
// as with controller-runtime's source.Channel: send with a select, or buffer the channel,
// if that matters. A nil channel gives a nil Trigger, which AddTrigger refuses.
func Channel(keys <-chan string) Trigger {
	if keys == nil {
		return nil
	}
	return func(ctx context.Context, enqueue func(key string) error) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case key, ok := <-keys:
				if !ok {
					return nil
				}
				if err := enqueue(key); err != nil {
					klog.FromContext(ctx).Error(err, "Key from a channel not enqueued", "key", key)
				}
			}
		}
	}
}

// loopContextKey is the key of the Loop in the contexts of its reconciles.
type loopContextKey struct{}

// enqueuer is what Enqueue finds in a reconcile's context: a *Loop[T, L].
type enqueuer interface {
	Enqueue(key string) error
}

// Enqueue makes the Loop whose reconcile ctx is the context of reconcile key, as
// Loop.Enqueue does: a reconciler asks for another key, of its own kind, to be
// reconciled (for a key of its own, return typed.Result.RequeueAfter). It returns
// ErrNotInReconcile for any other context.
func Enqueue(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("%w: Enqueue's context", typed.ErrNilArgument)
	}
	l, ok := ctx.Value(loopContextKey{}).(enqueuer)
	if !ok {
		return ErrNotInReconcile
	}
	return l.Enqueue(key)
}

// Enqueue makes l reconcile key (namespace/name, or name for a cluster-scoped object), as
// an event of l's cache for it would, with the priority of a live change; a key already
// waiting is reconciled once. It may be called from anywhere, a reconciler of l included
// (see also the package function Enqueue). While l does not run (the Manager has not
// started, or this replica does not lead), the key waits, and is reconciled once l runs;
// the keys waiting cost memory by key, not by call.
//
// It returns an error wrapping typed.ErrNilArgument for a nil l, ErrInvalidKey for a key
// without a name or of a namespace outside l's cache, and ErrStopped once the Manager
// has stopped its caches.
func (l *Loop[T, L]) Enqueue(key string) error {
	if l == nil {
		return fmt.Errorf("%w: Enqueue's loop", typed.ErrNilArgument)
	}
	ns, name := event.SplitKey(key)
	if name == "" {
		return fmt.Errorf("%w: %q names no object", ErrInvalidKey, key)
	}
	if !l.inScope(ns) {
		return fmt.Errorf("%w: %q is outside the namespaces of loop %q", ErrInvalidKey, key, l.needs.name)
	}
	t, err := l.triggers()
	if err != nil {
		return err
	}
	if l.cache.m.cachesStopped() {
		return ErrStopped
	}
	t.tickets.add(key)
	return nil
}

// AddTrigger runs t, under name (for logs and errors), in each term of l: while this
// replica leads, as l runs. The keys it enqueues are reconciled by l, as Loop.Enqueue's
// are. It returns an error wrapping typed.ErrNilArgument for a nil l or t, and ErrStopped
// once the Manager is stopping.
func (l *Loop[T, L]) AddTrigger(name string, t Trigger) error {
	switch {
	case l == nil:
		return fmt.Errorf("%w: AddTrigger's loop", typed.ErrNilArgument)
	case t == nil:
		return fmt.Errorf("%w: trigger %q of loop %q", typed.ErrNilArgument, name, l.needs.name)
	}
	if _, err := l.triggers(); err != nil {
		return err
	}
	return l.cache.m.add(&runnable{name: "trigger " + name + " of loop " + l.needs.name, leader: true,
		r: RunnableFunc(func(ctx context.Context) error { return t(ctx, l.Enqueue) })})
}

// inScope reports whether a key of namespace ns is one of l's.
func (l *Loop[T, L]) inScope(ns string) bool {
	ms := l.cache.members
	if len(ms) == 1 && ms[0].namespace == "" {
		return true // all namespaces, or a cluster-scoped resource
	}
	return slices.ContainsFunc(ms, func(mb member[T, L]) bool { return mb.namespace == ns })
}

// withLoop returns ctx carrying l, for Enqueue.
func (l *Loop[T, L]) withLoop(ctx context.Context) context.Context {
	return context.WithValue(ctx, loopContextKey{}, enqueuer(l))
}

// triggers returns l's triggers, made on first use.
//
// typed.Loop has no way to add a key by hand, so the keys enqueued are tickets: objects
// of an in-memory ListerWatcher, cached by a controller of their own (a private entry of
// the Manager, run and stopped with its caches) that every typed.Loop of l relates to
// (typed.Related). A ticket's event maps to its key if the ticket is still there, taking
// it: a key enqueued many times before its event is handled is reconciled once, and the
// ticket's deletion maps to nothing. Tickets wait while l does not run, and the Loop
// gets them, as additions of the controller's current state, when it runs again.
func (l *Loop[T, L]) triggers() (*triggers, error) {
	l.trigMu.Lock()
	defer l.trigMu.Unlock()
	if l.trig != nil {
		return l.trig, nil
	}
	m := l.cache.m
	t := &triggers{tickets: newTickets()}
	name := "triggers of loop " + l.needs.name
	c := controller.New(t.tickets, controller.Options[*metav1.PartialObjectMetadata]{Name: name})
	m.mu.Lock()
	if m.state >= stopped {
		m.mu.Unlock()
		return nil, ErrStopped
	}
	m.private++
	key := cacheKey{
		object:   goreflect.TypeFor[*metav1.PartialObjectMetadata](),
		list:     goreflect.TypeFor[*metav1.PartialObjectMetadataList](),
		resource: name,
		private:  m.private,
	}
	m.newEntryLocked(key, &entry{
		key: key, ctrl: c, run: c.Run, synced: c.HasSynced, served: newServed(name, name, nil),
		refs: 1, // held until the Manager stops
	})
	m.mu.Unlock()
	for i, loop := range l.loops {
		ns := l.cache.members[i].namespace
		typed.Related(loop, c, func(tk *metav1.PartialObjectMetadata) []string {
			key, err := event.ObjectKey(tk)
			if err != nil || (ns != "" && tk.Namespace != ns) || !t.tickets.take(key) {
				return nil
			}
			return []string{key}
		})
	}
	l.trig = t
	return t, nil
}

// triggers are the keys enqueued by hand into one Loop.
type triggers struct {
	tickets *tickets
}

// historyLength bounds the changes a tickets keeps for watches to replay.
const historyLength = 1024

// tickets is an in-memory ListerWatcher of one object per key waiting to be reconciled,
// that honours resource versions as a server does, for one controller.
type tickets struct {
	mu       sync.Mutex
	rv       int64
	pending  map[string]*metav1.PartialObjectMetadata
	history  []watch.Event // the latest changes, oldest first
	oldest   int64         // the resource version before history's first change
	watchers map[*ticketWatch]struct{}
}

func newTickets() *tickets {
	return &tickets{pending: map[string]*metav1.PartialObjectMetadata{}, watchers: map[*ticketWatch]struct{}{}}
}

// add records a ticket for key, or a new version of it.
func (t *tickets) add(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rv++
	ns, name := event.SplitKey(key)
	typ := watch.Modified
	if t.pending[key] == nil {
		typ = watch.Added
	}
	tk := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: strconv.FormatInt(t.rv, 10)}}
	t.pending[key] = tk
	t.recordLocked(watch.Event{Type: typ, Object: tk})
}

// take removes key's ticket, and reports whether there was one.
func (t *tickets) take(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk := t.pending[key]
	if tk == nil {
		return false
	}
	delete(t.pending, key)
	t.rv++
	gone := tk.DeepCopy()
	gone.ResourceVersion = strconv.FormatInt(t.rv, 10)
	t.recordLocked(watch.Event{Type: watch.Deleted, Object: gone})
	return true
}

func (t *tickets) recordLocked(e watch.Event) {
	t.history = append(t.history, e)
	if len(t.history) > historyLength {
		t.oldest = rvOf(t.history[0])
		t.history = slices.Delete(t.history, 0, 1)
	}
	for w := range t.watchers {
		w.push(e)
	}
}

func rvOf(e watch.Event) int64 {
	rv, _ := strconv.ParseInt(e.Object.(*metav1.PartialObjectMetadata).ResourceVersion, 10, 64)
	return rv
}

// List returns every ticket; it pages nothing.
func (t *tickets) List(context.Context, metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(t.rv, 10)}}
	for _, tk := range t.pending {
		l.Items = append(l.Items, *tk)
	}
	return l, nil
}

// Watch sends the changes after opts.ResourceVersion (every ticket as an addition for ""
// or "0"), then every change, until it is stopped or ctx ends. A resource version older
// than the history kept is 410 Gone, for a relist.
func (t *tickets) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var replay []watch.Event
	switch rv := opts.ResourceVersion; rv {
	case "", "0":
		for _, tk := range t.pending {
			replay = append(replay, watch.Event{Type: watch.Added, Object: tk})
		}
	default:
		from, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", rv))
		}
		if from < t.oldest {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, t.oldest))
		}
		for _, e := range t.history {
			if rvOf(e) > from {
				replay = append(replay, e)
			}
		}
	}
	w := &ticketWatch{
		t: t, buf: replay, notify: make(chan struct{}, 1),
		result: make(chan watch.Event), stop: make(chan struct{}), done: make(chan struct{}),
	}
	t.watchers[w] = struct{}{}
	go w.pump(ctx)
	return w, nil
}

// ticketWatch is one watch of tickets: an unbounded buffer, so that add and take never
// wait, drained into the result channel by a goroutine that ends with the watch.
type ticketWatch struct {
	t      *tickets
	mu     sync.Mutex
	buf    []watch.Event
	notify chan struct{}
	result chan watch.Event
	once   sync.Once
	stop   chan struct{}
	done   chan struct{}
}

func (w *ticketWatch) push(e watch.Event) {
	w.mu.Lock()
	w.buf = append(w.buf, e)
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *ticketWatch) pump(ctx context.Context) {
	defer close(w.done)
	defer close(w.result)
	defer func() {
		w.t.mu.Lock()
		delete(w.t.watchers, w)
		w.t.mu.Unlock()
	}()
	for {
		w.mu.Lock()
		events := w.buf
		w.buf = nil
		w.mu.Unlock()
		for _, e := range events {
			select {
			case w.result <- e:
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-w.notify:
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// ResultChan returns the watch's events.
func (w *ticketWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop ends the watch, and returns once its goroutine has.
func (w *ticketWatch) Stop() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}
