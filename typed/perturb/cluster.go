package perturb

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
)

// cluster is the in-memory API server every run of a Check talks to: one store of
// unstructured objects per resource, with the server's behaviour where controllers depend
// on it and client-go's fake tracker does not have it (resource versions stamped on
// objects, optimistic concurrency, generation, the status subresource, finalizers and
// graceful deletion, generateName, watches that replay from a resource version, bookmarks
// and 410 Gone), and the perturbations of reads: windows in which a resource's watches
// lag or lose events.
type cluster struct {
	clock clock.PassiveClock
	// kinds maps the resources of Definitions to their kinds; built-in ones are read from
	// client-go's scheme.
	kinds map[schema.GroupVersionResource]schema.GroupVersionKind

	mu       sync.Mutex
	changed  *sync.Cond
	closed   bool
	uids     int
	names    int
	res      map[schema.GroupVersionResource]*resource
	mutation func(gvr schema.GroupVersionResource) // called after every change, outside the lock
}

// resource is one resource's store, history and read perturbation.
type resource struct {
	objects map[types.NamespacedName]*unstructured.Unstructured
	history []change
	rv      int64
	// compacted: a watch from an older resource version gets 410 Gone.
	compacted int64
	// window is the read perturbation under way, if any.
	window *window
}

// change is one entry of a resource's history.
type change struct {
	typ       watch.EventType
	obj, prev *unstructured.Unstructured
	rv        int64
}

// window is a read perturbation of one resource: from history index from, either watches
// deliver nothing newer (lag) or what happens is never delivered (drop), until it closes
// after events more changes or at deadline.
type window struct {
	drop     bool
	from     int
	events   int
	deadline time.Time
}

// over says whether a window has seen its changes (counted from its first, the
// write that opened it included).
func (w *window) over(changes int) bool {
	return changes > w.events
}

func newCluster(clk clock.PassiveClock, kinds map[schema.GroupVersionResource]schema.GroupVersionKind) *cluster {
	c := &cluster{clock: clk, kinds: kinds, res: map[schema.GroupVersionResource]*resource{}}
	c.changed = sync.NewCond(&c.mu)
	return c
}

func (c *cluster) resource(gvr schema.GroupVersionResource) *resource {
	r := c.res[gvr]
	if r == nil {
		r = &resource{objects: map[types.NamespacedName]*unstructured.Unstructured{}}
		c.res[gvr] = r
	}
	return r
}

// kindOf returns the kind of gvr: a Definition's, or the built-in one client-go knows.
func (c *cluster) kindOf(gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
	if k, ok := c.kinds[gvr]; ok {
		return k, true
	}
	k, ok := builtinKinds[gvr]
	return k, ok
}

// builtinKinds are the kinds of client-go's scheme, by the resource their name guesses.
var builtinKinds = func() map[schema.GroupVersionResource]schema.GroupVersionKind {
	out := map[schema.GroupVersionResource]schema.GroupVersionKind{}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		out[plural] = gvk
	}
	return out
}()

// record appends a change, stamping obj with the next resource version, wakes the
// watches and closes a window that has seen its events. The caller holds c.mu.
func (c *cluster) record(gvr schema.GroupVersionResource, typ watch.EventType, obj, prev *unstructured.Unstructured) {
	r := c.resource(gvr)
	r.rv++
	obj.SetResourceVersion(strconv.FormatInt(r.rv, 10))
	r.history = append(r.history, change{typ: typ, obj: obj.DeepCopy(), prev: prev, rv: r.rv})
	if w := r.window; w != nil && w.over(len(r.history)-w.from) {
		c.closeWindowLocked(gvr, r)
	}
	c.changed.Broadcast()
}

// openWindow starts a read perturbation of gvr from its next change, or from its last
// one (last): the write that opens a lag is the first the watches do not show.
func (c *cluster) openWindow(gvr schema.GroupVersionResource, drop, last bool, events int, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.resource(gvr)
	if r.window != nil {
		return
	}
	from := len(r.history)
	if last && from > 0 {
		from--
	}
	r.window = &window{drop: drop, from: from, events: events, deadline: time.Now().Add(d)}
}

// expireWindows closes the windows past their deadline and reports whether any is still
// open and whether it closed one.
func (c *cluster) expireWindows() (open, closed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for gvr, r := range c.res {
		if r.window == nil {
			continue
		}
		if time.Now().After(r.window.deadline) {
			c.closeWindowLocked(gvr, r)
			closed = true
			continue
		}
		open = true
	}
	return open, closed
}

// closeWindowLocked ends r's window. A lag ends by letting the watches go on; a drop ends
// as a disconnected watch does when it comes back too late: what it missed is compacted
// away, so its reflector relists and sees only the final state.
func (c *cluster) closeWindowLocked(gvr schema.GroupVersionResource, r *resource) {
	if r.window.drop {
		r.compacted = r.rv
	}
	r.window = nil
	c.changed.Broadcast()
}

// shutdown ends every watch.
func (c *cluster) shutdown() {
	c.mu.Lock()
	c.closed = true
	c.changed.Broadcast()
	c.mu.Unlock()
}

func (c *cluster) notify(gvr schema.GroupVersionResource) {
	if c.mutation != nil {
		c.mutation(gvr)
	}
}

// get returns a copy of the stored object.
func (c *cluster) get(gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	obj, ok := c.resource(gvr).objects[types.NamespacedName{Namespace: ns, Name: name}]
	if !ok {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	return obj.DeepCopy(), nil
}

// list returns copies of the objects of ns ("" for all) that opts select, sorted, and
// the resource version they were read at: a consistent read, as etcd's quorum read.
func (c *cluster) list(gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) ([]*unstructured.Unstructured, string, error) {
	sel, err := selectorOf(opts)
	if err != nil {
		return nil, "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.resource(gvr)
	var out []*unstructured.Unstructured
	for _, key := range sortedKeys(r.objects) {
		if obj := r.objects[key]; (ns == "" || key.Namespace == ns) && sel(obj) {
			out = append(out, obj.DeepCopy())
		}
	}
	return out, strconv.FormatInt(r.rv, 10), nil
}

func sortedKeys(m map[types.NamespacedName]*unstructured.Unstructured) []types.NamespacedName {
	return slices.SortedFunc(maps.Keys(m), func(a, b types.NamespacedName) int {
		return strings.Compare(a.String(), b.String())
	})
}

// selectorOf returns the test of opts' label selector and metadata field selector.
func selectorOf(opts metav1.ListOptions) (func(*unstructured.Unstructured) bool, error) {
	lsel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	fsel, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return func(obj *unstructured.Unstructured) bool {
		return lsel.Matches(labels.Set(obj.GetLabels())) &&
			fsel.Matches(fields.Set{"metadata.name": obj.GetName(), "metadata.namespace": obj.GetNamespace()})
	}, nil
}

// create stores obj as the API server does: a name from generateName, a UID, a creation
// time, generation 1 and a resource version.
func (c *cluster) create(gvr schema.GroupVersionResource, ns string, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	c.mu.Lock()
	defer func() { c.mu.Unlock(); c.notify(gvr) }()
	if ns != "" {
		obj.SetNamespace(ns)
	}
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		c.names++
		obj.SetName(obj.GetGenerateName() + strconv.FormatInt(int64(c.names)+36*36*36*36, 36)[1:])
	}
	if obj.GetName() == "" {
		return nil, apierrors.NewInvalid(gvr.GroupVersion().WithKind(obj.GetKind()).GroupKind(), "", nil)
	}
	r := c.resource(gvr)
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if _, ok := r.objects[key]; ok {
		return nil, apierrors.NewAlreadyExists(gvr.GroupResource(), obj.GetName())
	}
	c.uids++
	obj.SetUID(types.UID(fmt.Sprintf("%s-%d", gvr.Resource, c.uids)))
	obj.SetCreationTimestamp(metav1.NewTime(c.clock.Now().Truncate(time.Second)))
	obj.SetGeneration(1)
	obj.SetDeletionTimestamp(nil)
	obj.SetManagedFields(nil)
	c.record(gvr, watch.Added, obj, nil)
	r.objects[key] = obj
	return obj.DeepCopy(), nil
}

// update replaces the stored object: the status only (status) or all but the status,
// with optimistic concurrency on a resource version that obj carries. An update that
// changes nothing writes nothing; one that removes the last finalizer of an object being
// deleted deletes it.
func (c *cluster) update(gvr schema.GroupVersionResource, ns string, obj *unstructured.Unstructured, status bool) (*unstructured.Unstructured, error) {
	c.mu.Lock()
	defer func() { c.mu.Unlock(); c.notify(gvr) }()
	if ns != "" {
		obj.SetNamespace(ns)
	}
	r := c.resource(gvr)
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	stored, ok := r.objects[key]
	if !ok {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), obj.GetName())
	}
	if rv := obj.GetResourceVersion(); rv != "" && rv != stored.GetResourceVersion() {
		return nil, apierrors.NewConflict(gvr.GroupResource(), obj.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	next := stored.DeepCopy()
	if status {
		if s, ok := obj.Object["status"]; ok {
			next.Object["status"] = s
		} else {
			delete(next.Object, "status")
		}
	} else {
		next = obj.DeepCopy()
		if s, ok := stored.Object["status"]; ok {
			next.Object["status"] = s
		} else {
			delete(next.Object, "status")
		}
		next.SetUID(stored.GetUID())
		next.SetCreationTimestamp(stored.GetCreationTimestamp())
		next.SetDeletionTimestamp(stored.GetDeletionTimestamp())
		next.SetGeneration(stored.GetGeneration())
		next.SetManagedFields(nil)
		if !apiequality.Semantic.DeepEqual(content(stored), content(next)) {
			next.SetGeneration(stored.GetGeneration() + 1)
		}
	}
	next.SetResourceVersion(stored.GetResourceVersion())
	if apiequality.Semantic.DeepEqual(stored.Object, next.Object) {
		return stored.DeepCopy(), nil
	}
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		delete(r.objects, key)
		c.record(gvr, watch.Deleted, next, stored)
		return next.DeepCopy(), nil
	}
	c.record(gvr, watch.Modified, next, stored)
	r.objects[key] = next
	return next.DeepCopy(), nil
}

// content is an object without its metadata and status: what its generation counts.
func content(u *unstructured.Unstructured) map[string]any {
	out := maps.Clone(u.Object)
	delete(out, "metadata")
	delete(out, "status")
	delete(out, "apiVersion")
	delete(out, "kind")
	return out
}

// remove deletes an object, checking opts' preconditions; one with finalizers is only
// marked as being deleted.
func (c *cluster) remove(gvr schema.GroupVersionResource, ns, name string, opts metav1.DeleteOptions) error {
	c.mu.Lock()
	defer func() { c.mu.Unlock(); c.notify(gvr) }()
	r := c.resource(gvr)
	key := types.NamespacedName{Namespace: ns, Name: name}
	stored, ok := r.objects[key]
	if !ok {
		return apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	if p := opts.Preconditions; p != nil {
		if p.UID != nil && *p.UID != stored.GetUID() || p.ResourceVersion != nil && *p.ResourceVersion != stored.GetResourceVersion() {
			return apierrors.NewConflict(gvr.GroupResource(), name, fmt.Errorf("precondition failed"))
		}
	}
	next := stored.DeepCopy()
	if len(stored.GetFinalizers()) > 0 {
		if stored.GetDeletionTimestamp() == nil {
			now := metav1.NewTime(c.clock.Now().Truncate(time.Second))
			next.SetDeletionTimestamp(&now)
			next.SetDeletionGracePeriodSeconds(new(int64))
			// As the API server's graceful deletion does: controllers that filter
			// on generation changes see the deletion begin.
			next.SetGeneration(stored.GetGeneration() + 1)
			c.record(gvr, watch.Modified, next, stored)
			r.objects[key] = next
		}
		return nil
	}
	delete(r.objects, key)
	c.record(gvr, watch.Deleted, next, stored)
	return nil
}

// watch opens a watch of gvr in ns from opts.ResourceVersion; out converts what it sends.
func (c *cluster) watch(gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions, out func(*unstructured.Unstructured) runtime.Object) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		return nil, apierrors.NewBadRequest("sendInitialEvents is not served by this fake")
	}
	sel, err := selectorOf(opts)
	if err != nil {
		return nil, err
	}
	w := &watcher{c: c, gvr: gvr, ns: ns, sel: sel, out: out, bookmarks: opts.AllowWatchBookmarks,
		ch: make(chan watch.Event), stop: make(chan struct{})}
	if opts.TimeoutSeconds != nil {
		w.deadline = time.Now().Add(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	c.mu.Lock()
	r := c.resource(gvr)
	var initial []watch.Event
	switch rv := opts.ResourceVersion; rv {
	case "", "0":
		for _, key := range sortedKeys(r.objects) {
			if obj := r.objects[key]; (ns == "" || key.Namespace == ns) && sel(obj) {
				initial = append(initial, watch.Event{Type: watch.Added, Object: out(obj.DeepCopy())})
			}
		}
		w.next, w.sent = len(r.history), r.rv
	default:
		from, err := strconv.ParseInt(rv, 10, 64)
		switch {
		case err != nil:
			c.mu.Unlock()
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", rv))
		case from < r.compacted:
			initial = []watch.Event{{Type: watch.Error, Object: &apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, r.compacted)).ErrStatus}}
			w.gone = true
		case from > r.rv:
			c.mu.Unlock()
			return nil, apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", from, r.rv), 1)
		}
		w.next, _ = slices.BinarySearchFunc(r.history, from, func(ch change, rv int64) int { return int(ch.rv - rv) })
		if w.next < len(r.history) && r.history[w.next].rv == from {
			w.next++
		}
		w.sent = from
	}
	c.mu.Unlock()
	go w.run(initial)
	return w, nil
}

// watcher is one open watch: it sends the resource's history from next on, as far as
// the resource's window lets it.
type watcher struct {
	c         *cluster
	gvr       schema.GroupVersionResource
	ns        string
	sel       func(*unstructured.Unstructured) bool
	out       func(*unstructured.Unstructured) runtime.Object
	bookmarks bool
	deadline  time.Time
	gone      bool
	next      int
	sent      int64 // the resource version the watch has brought its reader to
	marked    int64 // the last bookmark's
	ch        chan watch.Event
	stop      chan struct{}
	once      sync.Once
}

func (w *watcher) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.c.mu.Lock()
		w.c.changed.Broadcast()
		w.c.mu.Unlock()
	})
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.ch }

func (w *watcher) send(e watch.Event) bool {
	select {
	case w.ch <- e:
		return true
	case <-w.stop:
		return false
	}
}

func (w *watcher) run(initial []watch.Event) {
	defer close(w.ch)
	for _, e := range initial {
		if !w.send(e) {
			return
		}
	}
	if w.gone {
		return
	}
	if !w.deadline.IsZero() {
		// The cond wait below wakes on changes only: a timer wakes it at the deadline.
		t := time.AfterFunc(time.Until(w.deadline), func() {
			w.c.mu.Lock()
			w.c.changed.Broadcast()
			w.c.mu.Unlock()
		})
		defer t.Stop()
	}
	for {
		e, ok := w.wait()
		if !ok || !w.send(e) {
			return
		}
	}
}

// wait returns the next event to send, or false when the watch ends.
func (w *watcher) wait() (watch.Event, bool) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		select {
		case <-w.stop:
			return watch.Event{}, false
		default:
		}
		if c.closed || !w.deadline.IsZero() && time.Now().After(w.deadline) {
			return watch.Event{}, false
		}
		r := c.resource(w.gvr)
		if r.compacted > w.sent && r.window == nil {
			// What this watch would still send was lost in a window that dropped it.
			return watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("the watch was disconnected; too old resource version").ErrStatus}, true
		}
		limit := len(r.history)
		if r.window != nil {
			limit = min(limit, r.window.from)
		}
		for w.next < limit {
			ch := r.history[w.next]
			w.next++
			if e, ok := w.eventOf(ch); ok {
				w.sent = ch.rv
				return e, true
			}
			w.sent = ch.rv
		}
		if r.window != nil && r.window.drop {
			// Dropped: the watch moves past what it will never send.
			w.next = len(r.history)
		}
		if w.bookmarks && w.sent > w.marked {
			w.marked = w.sent
			b := &unstructured.Unstructured{}
			if k, ok := c.kindOf(w.gvr); ok {
				b.SetGroupVersionKind(k)
			}
			b.SetResourceVersion(strconv.FormatInt(w.sent, 10))
			return watch.Event{Type: watch.Bookmark, Object: w.out(b)}, true
		}
		c.changed.Wait()
	}
}

// eventOf is the event a change is to this watch: none outside its namespace and
// selector; an addition or a deletion for an object that entered or left the selector.
func (w *watcher) eventOf(ch change) (watch.Event, bool) {
	if w.ns != "" && ch.obj.GetNamespace() != w.ns {
		return watch.Event{}, false
	}
	now, before := w.sel(ch.obj), ch.prev != nil && w.sel(ch.prev)
	typ := ch.typ
	switch {
	case ch.typ == watch.Modified && now && !before:
		typ = watch.Added
	case ch.typ == watch.Modified && !now && before:
		typ = watch.Deleted
	case !now && !(ch.typ == watch.Deleted && before):
		return watch.Event{}, false
	}
	return watch.Event{Type: typ, Object: w.out(ch.obj.DeepCopy())}, true
}

// toUnstructured converts a typed object to the store's form, with its kind.
func toUnstructured(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u = u.DeepCopy()
		if u.GetKind() == "" {
			u.SetGroupVersionKind(gvk)
		}
		return u, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// typedOf converts a stored object to a new object of gvk's Go type.
func typedOf(u *unstructured.Unstructured, gvk schema.GroupVersionKind) (runtime.Object, error) {
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// client is the cluster as one client sees it: typed objects for a generated clientset,
// unstructured ones for a dynamic client. It is the ObjectTracker that client-go's
// ObjectReaction applies patches with.
type client struct {
	c      *cluster
	typed  bool
	status bool // the action is on the status subresource
}

var _ k8stesting.ObjectTracker = client{}

func (cl client) out(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (runtime.Object, error) {
	if !cl.typed {
		return u, nil
	}
	gvk, ok := cl.c.kindOf(gvr)
	if !ok {
		return nil, fmt.Errorf("%w: no kind known for %s", ErrInvalid, gvr)
	}
	return typedOf(u, gvk)
}

func (cl client) in(gvr schema.GroupVersionResource, obj runtime.Object) (*unstructured.Unstructured, error) {
	gvk, _ := cl.c.kindOf(gvr)
	return toUnstructured(obj, gvk)
}

func (cl client) Add(obj runtime.Object) error {
	return fmt.Errorf("%w: Add is not served; write through a client", ErrInvalid)
}

func (cl client) Get(gvr schema.GroupVersionResource, ns, name string, _ ...metav1.GetOptions) (runtime.Object, error) {
	u, err := cl.c.get(gvr, ns, name)
	if err != nil {
		return nil, err
	}
	return cl.out(gvr, u)
}

func (cl client) Create(gvr schema.GroupVersionResource, obj runtime.Object, ns string, _ ...metav1.CreateOptions) error {
	u, err := cl.in(gvr, obj)
	if err != nil {
		return err
	}
	_, err = cl.c.create(gvr, ns, u)
	return err
}

func (cl client) Update(gvr schema.GroupVersionResource, obj runtime.Object, ns string, _ ...metav1.UpdateOptions) error {
	u, err := cl.in(gvr, obj)
	if err != nil {
		return err
	}
	_, err = cl.c.update(gvr, ns, u, cl.status)
	return err
}

func (cl client) Patch(gvr schema.GroupVersionResource, obj runtime.Object, ns string, _ ...metav1.PatchOptions) error {
	return cl.Update(gvr, obj, ns)
}

func (cl client) Apply(gvr schema.GroupVersionResource, _ runtime.Object, _ string, _ ...metav1.PatchOptions) error {
	return apierrors.NewMethodNotSupported(gvr.GroupResource(), "apply (server-side apply is not served by this fake)")
}

func (cl client) List(gvr schema.GroupVersionResource, _ schema.GroupVersionKind, ns string, opts ...metav1.ListOptions) (runtime.Object, error) {
	var o metav1.ListOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	items, rv, err := cl.c.list(gvr, ns, o)
	if err != nil {
		return nil, err
	}
	gvk, ok := cl.c.kindOf(gvr)
	if !ok {
		return nil, fmt.Errorf("%w: no kind known for %s", ErrInvalid, gvr)
	}
	if !cl.typed {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		l.SetResourceVersion(rv)
		for _, u := range items {
			l.Items = append(l.Items, *u)
		}
		return l, nil
	}
	l, err := scheme.Scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil, err
	}
	objs := make([]runtime.Object, 0, len(items))
	for _, u := range items {
		o, err := typedOf(u, gvk)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	if err := meta.SetList(l, objs); err != nil {
		return nil, err
	}
	acc, err := meta.ListAccessor(l)
	if err != nil {
		return nil, err
	}
	acc.SetResourceVersion(rv)
	return l, nil
}

func (cl client) Delete(gvr schema.GroupVersionResource, ns, name string, opts ...metav1.DeleteOptions) error {
	var o metav1.DeleteOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	return cl.c.remove(gvr, ns, name, o)
}

func (cl client) Watch(gvr schema.GroupVersionResource, ns string, opts ...metav1.ListOptions) (watch.Interface, error) {
	var o metav1.ListOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	gvk, ok := cl.c.kindOf(gvr)
	if !ok && cl.typed {
		return nil, fmt.Errorf("%w: no kind known for %s", ErrInvalid, gvr)
	}
	out := func(u *unstructured.Unstructured) runtime.Object {
		if !cl.typed {
			return u
		}
		o, err := typedOf(u, gvk) // a bookmark's few fields convert too
		if err != nil {
			return u // the watch's reader reports an object of the wrong type
		}
		return o
	}
	return cl.c.watch(gvr, ns, o, out)
}

// react serves one action of a client: reads and writes through client-go's
// ObjectReaction (which applies patches), on the status subresource as such.
func (cl client) react(a k8stesting.Action) (bool, runtime.Object, error) {
	cl.status = a.GetSubresource() == "status"
	if a.GetSubresource() != "" && !cl.status {
		return true, nil, apierrors.NewMethodNotSupported(a.GetResource().GroupResource(), a.GetVerb()+" "+a.GetSubresource())
	}
	if a.GetVerb() == "delete-collection" {
		return true, nil, apierrors.NewMethodNotSupported(a.GetResource().GroupResource(), a.GetVerb())
	}
	gvr := a.GetResource()
	var u *unstructured.Unstructured
	var err error
	switch a := a.(type) {
	case k8stesting.CreateActionImpl:
		if cl.status {
			return true, nil, apierrors.NewMethodNotSupported(gvr.GroupResource(), "create status")
		}
		if u, err = cl.in(gvr, a.GetObject()); err == nil {
			u, err = cl.c.create(gvr, a.GetNamespace(), u)
		}
	case k8stesting.UpdateActionImpl:
		if u, err = cl.in(gvr, a.GetObject()); err == nil {
			u, err = cl.c.update(gvr, a.GetNamespace(), u, cl.status)
		}
	case k8stesting.GetActionImpl:
		u, err = cl.c.get(gvr, a.GetNamespace(), a.GetName())
	default:
		// Lists, deletions, and patches, which ObjectReaction applies to a Get.
		return k8stesting.ObjectReaction(cl)(a)
	}
	if err != nil {
		return true, nil, err
	}
	obj, err := cl.out(gvr, u)
	return true, obj, err
}

// watchReact serves a client's watch.
func (cl client) watchReact(a k8stesting.Action) (bool, watch.Interface, error) {
	wa, ok := a.(k8stesting.WatchActionImpl)
	if !ok {
		return true, nil, fmt.Errorf("%w: a watch action of type %T", ErrInvalid, a)
	}
	w, err := cl.Watch(a.GetResource(), a.GetNamespace(), wa.ListOptions)
	return true, w, err
}
