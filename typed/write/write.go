package write

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed/client"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/consistency"
)

// Getter reads one object by name, in the namespace its client is for.
type Getter[T event.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
}

// Patcher reads and patches objects: what a Finalizer needs.
type Patcher[T event.Object] interface {
	Getter[T]
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// StatusUpdater reads objects and writes their status subresource: what a StatusWriter
// needs.
type StatusUpdater[T event.Object] interface {
	Getter[T]
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// OwnedClient reads, creates, updates and deletes objects: what Owned needs. Generated
// clients and client.Dynamic are ones.
type OwnedClient[T event.Object] interface {
	Getter[T]
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// CacheReader reads a cached object by namespace and name: the one method of the read
// API (eventcache.Reader) the writers need, so that any cache, a controller's Store or a
// manager.Cache, or a test's map, can be given.
type CacheReader[T event.Object] interface {
	GetByName(namespace, name string) (T, bool)
}

// ClusterScoped turns the client of a cluster-scoped kind into the per-namespace
// function the writers take: NewFinalizer(ClusterScoped(clientset.CoreV1().Nodes()), ...).
// The namespace, "" for cluster-scoped objects, is ignored.
func ClusterScoped[C any](client C) func(namespace string) C {
	return func(string) C { return client }
}

// perNamespace turns clients into a function returning the interface I, reporting a nil
// function or a nil client as an error wrapping controller.ErrNilArgument.
func perNamespace[I any, C any](clients func(namespace string) C, conv func(C) I) func(namespace string) (I, error) {
	if clients == nil {
		return nil
	}
	return func(namespace string) (I, error) {
		c := clients(namespace)
		if guard.IsNil(c) {
			var zero I
			return zero, fmt.Errorf("%w: the client for namespace %q", controller.ErrNilArgument, namespace)
		}
		return conv(c), nil
	}
}

// copies returns two deep copies of obj made through its JSON form, so that a mutation
// of one is compared with the other. They are made through JSON rather than
// DeepCopyObject because a custom resource's hand-written DeepCopyObject often copies
// only the top level: the mutation would then change the cached object too, and the
// comparison would see no change. JSON is also the form the server receives, and a
// conversion it does not keep exactly (a time's precision) is the same in both copies.
func copies[T event.Object](obj T) (before, after T, err error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return before, after, fmt.Errorf("copying %T: %w", obj, err)
	}
	before, after = newObject[T](), newObject[T]()
	if err := json.Unmarshal(data, before); err != nil {
		return before, after, fmt.Errorf("copying %T: %w", obj, err)
	}
	if err := json.Unmarshal(data, after); err != nil {
		return before, after, fmt.Errorf("copying %T: %w", obj, err)
	}
	return before, after, nil
}

// A writer compares before it writes, and what it compares with is normally the cache's
// copy of the object, which may not have seen the writer's own last write yet: in the same
// reconcile, or in the next one before the watch delivered the write. Compared with that
// copy, a write bringing a field back to the value the copy still holds would look like no
// change and be skipped, silently, while the server keeps the first write's value. So
// each writer remembers, per object, the state the server returned from its own last
// successful write, and compares with (and writes over) that state whenever the object
// it is given is older (DESIGN 20: compare with a state at least as new as the writer's
// own last write).
const (
	// lastWritesLimit is the most objects one writer remembers its last write of; beyond
	// it, the least recently written is forgotten first.
	lastWritesLimit = 4096
	// lastWritesMaxAge is how long a writer remembers a write that the cache it is given
	// objects from has not caught up with: a cache still behind by then has lost its
	// watch, and the typed.Loop reading it has a larger problem than a stale comparison.
	lastWritesMaxAge = 10 * time.Minute
)

// freshness says how the object a writer is given compares with its own last write of
// that object.
type freshness int

const (
	// givenIsNewest: the writer has no later write of the object (none it remembers, or
	// the given object is at least as new): the given object is compared with.
	givenIsNewest freshness = iota
	// ownIsNewer: the writer's own last write is newer than the given object: the state
	// it got back from that write is compared with instead.
	ownIsNewer
	// unordered: the resource versions cannot be ordered (they are not decimal integers,
	// which kube-apiserver's, etcd revisions, always are): the object must be read from
	// the server.
	unordered
)

// lastWrites remembers, per object key (namespace/name), the state a writer got back
// from its own last successful write of that object. Its memory is bounded: an entry is
// forgotten once the writer is given the object at a resource version at least as new
// as the entry's (the cache has caught up), after lastWritesMaxAge, and, beyond
// lastWritesLimit entries, least recently written first. A forgotten entry makes the
// writer compare with the object it is given, as if it had never written it. Keyed by
// name, an entry also covers an object deleted and created again under that name:
// resource versions order states across both, and UIDs tell them apart.
//
// It is safe for concurrent use; a nil *lastWrites remembers nothing.
type lastWrites[T event.Object] struct {
	mu     sync.Mutex
	limit  int
	maxAge time.Duration
	now    func() time.Time
	byKey  map[string]*list.Element // of *lastWrite[T]
	order  list.List                // least recently written first
}

type lastWrite[T event.Object] struct {
	key string
	obj T // as the server returned it; never modified
	at  time.Time
}

func newLastWrites[T event.Object]() *lastWrites[T] {
	return &lastWrites[T]{limit: lastWritesLimit, maxAge: lastWritesMaxAge, now: time.Now, byKey: map[string]*list.Element{}}
}

// writeKey is the key lastWrites keeps an object under.
func writeKey(namespace, name string) string { return namespace + "/" + name }

// newest returns the newest state of the object key that the writer knows, given obj: obj
// itself, or the state it got back from its own last write of the object when obj is
// older than that; and which of the two it is. It forgets the write once obj is at least
// as new.
func (l *lastWrites[T]) newest(key string, obj T) (T, freshness) {
	if l == nil {
		return obj, givenIsNewest
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	e, ok := l.byKey[key]
	if !ok {
		return obj, givenIsNewest
	}
	last := e.Value.(*lastWrite[T]).obj
	switch {
	case last.GetResourceVersion() == obj.GetResourceVersion() || event.NotNewer(obj, last):
		l.removeLocked(e)
		return obj, givenIsNewest
	case event.NotNewer(last, obj):
		return last, ownIsNewer
	default:
		return obj, unordered
	}
}

// record remembers written, the state the server returned from a write of the object
// key, unless the writer remembers a newer one. A state without a resource version,
// which no API server returns, is not remembered.
func (l *lastWrites[T]) record(ctx context.Context, key string, written T) {
	if guard.IsNil(written) || written.GetResourceVersion() == "" {
		return
	}
	// For the reconcile loop too: the key being reconciled waits for its caches to apply
	// this write before it is reconciled again.
	consistency.Wrote(ctx, written)
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	if e, ok := l.byKey[key]; ok {
		last := e.Value.(*lastWrite[T]).obj
		if last.GetResourceVersion() != written.GetResourceVersion() && event.NotNewer(last, written) {
			return // a concurrent write of the same object returned a newer state first
		}
		l.removeLocked(e)
	}
	l.byKey[key] = l.order.PushBack(&lastWrite[T]{key: key, obj: written, at: l.now()})
	for l.order.Len() > l.limit {
		l.removeLocked(l.order.Front())
	}
}

// forget forgets the write of the object key: it is deleted, and its deletion observed.
func (l *lastWrites[T]) forget(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.byKey[key]; ok {
		l.removeLocked(e)
	}
}

// len returns how many writes are remembered.
func (l *lastWrites[T]) len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	return l.order.Len()
}

func (l *lastWrites[T]) expireLocked() {
	now := l.now()
	for e := l.order.Front(); e != nil && now.Sub(e.Value.(*lastWrite[T]).at) > l.maxAge; e = l.order.Front() {
		l.removeLocked(e)
	}
}

func (l *lastWrites[T]) removeLocked(e *list.Element) {
	delete(l.byKey, e.Value.(*lastWrite[T]).key)
	l.order.Remove(e)
}

// answered returns the error of a client's verb that returned got: err, or, for a nil
// object returned with no error, an error wrapping ErrNilObject: the writer
// would otherwise go on from a state it does not have.
func answered[T event.Object](verb string, got T, err error) error {
	if err == nil && guard.IsNil(got) {
		return fmt.Errorf("%w: the client's %s", ErrNilObject, verb)
	}
	return err
}

// readAgain reads obj from the server, for a write that cannot trust the copy it has: a
// NotFound wraps ErrGone, and an object of obj's name that is another object (deleted and
// created again) gives errRecreated's error. The three writers re-read through it.
func readAgain[T event.Object](ctx context.Context, client Getter[T], obj T) (T, error) {
	var zero T
	got, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return zero, fmt.Errorf("%w: %w", ErrGone, err)
	}
	if err := answered("Get", got, err); err != nil {
		return zero, err
	}
	if event.OtherObject(obj, got) {
		return zero, errRecreated(obj, got)
	}
	return got, nil
}

// errRecreated returns the error of a write to obj found to be gone because an object of
// the same name, now, is another object: ErrGone and a NotFound (apierrors.IsNotFound)
// naming both UIDs. Nothing is written to the new object.
func errRecreated(obj, now metav1.Object) error {
	return fmt.Errorf("%w: %w", ErrGone, &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusNotFound,
		Reason: metav1.StatusReasonNotFound,
		Details: &metav1.StatusDetails{
			Name: obj.GetName(),
			UID:  obj.GetUID(),
		},
		Message: fmt.Sprintf("the object of uid %s was deleted, and an object of the same name created again (uid %s)", obj.GetUID(), now.GetUID()),
	}})
}

// newObject is client.New, named apart from the write side's many variables named client.
func newObject[T event.Object]() T { return client.New[T]() }
