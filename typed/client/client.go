package client

import (
	"context"
	"errors"
	"fmt"
	goreflect "reflect"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
)

// The metadata client is a ListerWatcher of PartialObjectMetadata as it is: watch only
// the metadata of any resource, at a fraction of the memory.
var _ controller.ListerWatcher[*metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList] = metadata.ResourceInterface(nil)

// The dynamic client is a ListerWatcher of Unstructured as it is.
var _ controller.ListerWatcher[*unstructured.Unstructured, *unstructured.UnstructuredList] = dynamic.ResourceInterface(nil)

// List is a generic list type for object types that have none, such as a CRD's Go struct
// written by hand: List[*MyResource] is the L of a controller over *MyResource.
type List[T event.Object] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the listed objects.
	Items []T `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *List[T]) DeepCopyObject() runtime.Object {
	out := &List[T]{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]T, len(l.Items))
	var zero T
	for i, item := range l.Items {
		if item != zero { // a nil item stays nil rather than panic in its DeepCopyObject
			out.Items[i] = item.DeepCopyObject().(T)
		}
	}
	return out
}

// Dynamic lists and watches a resource through the dynamic client and converts each
// object to T, a Go struct with JSON tags like any API type, with no code generation
// (runtime.DefaultUnstructuredConverter does the work). It is a
// controller.ListerWatcher[T, *List[T]].
//
// An object that does not convert to T is never dropped silently, and never taken for a
// deleted one: List returns the items that converted with an error wrapping
// reflect.ErrIncompleteList and every conversion error, so that the reflector reports it
// and deletes nothing on that list; Watch sends a *reflect.Unreadable carrying the
// conversion error, which the reflector reports and skips, keeping the cached state (a
// deletion is still recorded, with the last known state, since the server said the
// object is gone). Either way the error reaches the controller's error handler
// (controller.Options.OnError).
type Dynamic[T event.Object] struct {
	client dynamic.ResourceInterface
	// direct, when set (ForResource), lists and watches instead of client, decoding
	// straight into T.
	direct *direct
	// omitManagedFields: see WithoutManagedFields.
	omitManagedFields bool
}

// WithoutManagedFields returns a copy of d whose List and Watch leave out each object's
// metadata.managedFields (Get and the writes are d's), for a cache that would drop them
// anyway (StripManagedFields; a Manager's caches do unless Options.KeepManagedFields):
// its objects come without them, and cost neither the decoding nor the memory. Over
// ForResource and FromREST the JSON decoders never see them (each object's
// metadata.managedFields, and only those, are replaced with null in the stream as it is
// read; a custom resource's are often half its JSON); over FromDynamic they are removed
// before the conversion to T. A nil d gives nil.
func (d *Dynamic[T]) WithoutManagedFields() *Dynamic[T] {
	if d == nil {
		return nil
	}
	c := *d
	c.omitManagedFields = true
	return &c
}

// FromDynamic returns a Dynamic over client, for example
// dynamicClient.Resource(gvr).Namespace(ns).
// A nil client gives a nil *Dynamic, which controller.New refuses with
// controller.ErrNilArgument.
func FromDynamic[T event.Object](client dynamic.ResourceInterface) *Dynamic[T] {
	if guard.IsNil(client) {
		return nil
	}
	return &Dynamic[T]{client: client}
}

var _ controller.ListerWatcher[*unstructured.Unstructured, *List[*unstructured.Unstructured]] = (*Dynamic[*unstructured.Unstructured])(nil)

// IsWatchListSemanticsUnSupported answers for the client d reads through (see
// reflect.WatchListUnsupported): true over client-go's dynamic fake, whose watch
// accepts a watch-list request and never ends its initial events, so that a reflector
// with watch-list on lists instead.
func (d *Dynamic[T]) IsWatchListSemanticsUnSupported() bool {
	switch {
	case d == nil:
		return false
	case d.direct != nil:
		return reflect.WatchListUnsupported(d.direct.client)
	}
	return reflect.WatchListUnsupported(d.client)
}

// New returns a new, empty object of type T: for a pointer type such as *corev1.Pod, a
// pointer to its zero value, what a decoder fills in.
func New[T event.Object]() T {
	var zero T
	return goreflect.New(goreflect.TypeOf(zero).Elem()).Interface().(T)
}

func convert[T event.Object](u *unstructured.Unstructured) (T, error) {
	obj := New[T]()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		var zero T
		return zero, fmt.Errorf("converting %s %s/%s to %T: %w", u.GetKind(), u.GetNamespace(), u.GetName(), obj, err)
	}
	return obj, nil
}

// List lists through the dynamic client and converts every item. When some items do not
// convert, it returns the list of those that did together with an error wrapping
// reflect.ErrIncompleteList and each conversion error.
func (d *Dynamic[T]) List(ctx context.Context, opts metav1.ListOptions) (*List[T], error) {
	if d == nil {
		_, err := d.nilClient()
		return nil, err
	}
	if d.direct != nil {
		return listDirect[T](ctx, d.direct, opts, d.omitManagedFields)
	}
	ul, err := d.client.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	if ul == nil {
		return nil, fmt.Errorf("%w: the dynamic client's List returned a nil list", reflect.ErrNilResult)
	}
	out := &List[T]{TypeMeta: metav1.TypeMeta{APIVersion: ul.GetAPIVersion(), Kind: ul.GetKind()}}
	out.SetResourceVersion(ul.GetResourceVersion())
	out.SetContinue(ul.GetContinue())
	out.RemainingItemCount = ul.GetRemainingItemCount()
	out.Items = make([]T, 0, len(ul.Items))
	var errs []error
	for i := range ul.Items {
		if d.omitManagedFields {
			unstructured.RemoveNestedField(ul.Items[i].Object, "metadata", "managedFields")
		}
		obj, err := convert[T](&ul.Items[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.Items = append(out.Items, obj)
	}
	if errs != nil {
		return out, fmt.Errorf("%w: %d of %d items did not convert: %w", reflect.ErrIncompleteList, len(errs), len(ul.Items), errors.Join(errs...))
	}
	return out, nil
}

// Watch watches through the dynamic client and converts every object. An object that does
// not convert arrives as a *reflect.Unreadable carrying the conversion error; a bookmark
// that does not convert arrives as it came, since only its metadata is read. Stop ends the
// converting goroutine even when nobody reads the result channel any more.
func (d *Dynamic[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if d == nil {
		_, err := d.nilClient()
		return nil, err
	}
	if d.direct != nil {
		return watchDirect[T](ctx, d.direct, opts, d.omitManagedFields)
	}
	w, err := d.client.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	// The converting goroutine would panic on a nil watch and never end on a nil channel.
	if v := goreflect.ValueOf(w); w == nil || v.Kind() == goreflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: the dynamic client's Watch returned %#v", reflect.ErrNilResult, w)
	}
	upstream := w.ResultChan()
	if upstream == nil {
		w.Stop()
		return nil, fmt.Errorf("%w: the dynamic client's Watch returned a %T whose result channel is nil", reflect.ErrNilResult, w)
	}
	cw := &convertingWatch[T]{upstream: w, events: upstream, result: make(chan watch.Event), stop: make(chan struct{}), omitManagedFields: d.omitManagedFields}
	go cw.loop()
	return cw, nil
}

// convertingWatch converts the objects of a dynamic watch to T. Unlike watch.Filter's
// goroutine, whose send blocks forever once the reader has gone, its loop also waits
// for Stop.
type convertingWatch[T event.Object] struct {
	upstream watch.Interface
	events   <-chan watch.Event // upstream's
	result   chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
	// omitManagedFields: the objects lose their managedFields before the conversion.
	omitManagedFields bool
}

func (w *convertingWatch[T]) ResultChan() <-chan watch.Event { return w.result }

func (w *convertingWatch[T]) Stop() {
	w.stopOnce.Do(func() {
		close(w.stop)
		w.upstream.Stop()
	})
}

func (w *convertingWatch[T]) loop() {
	defer close(w.result)
	defer w.Stop()
	for {
		var e watch.Event
		var ok bool
		select {
		case <-w.stop:
			return
		case e, ok = <-w.events:
			if !ok {
				return
			}
		}
		// ERROR events keep their status for the reflector; a nil object is for the
		// reflector to report.
		if u, isU := e.Object.(*unstructured.Unstructured); isU && u != nil && e.Type != watch.Error {
			if w.omitManagedFields {
				unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
			}
			switch obj, err := convert[T](u); {
			case err == nil:
				e.Object = obj
			case e.Type != watch.Bookmark:
				e.Object = &reflect.Unreadable{Object: u, Err: err}
			}
		}
		select {
		case w.result <- e:
		case <-w.stop:
			return
		}
	}
}

// StripManagedFields is a transform for controller.Options.Transform that drops
// metadata.managedFields, which controllers rarely read and which is often most of an
// object's size.
func StripManagedFields[T event.Object](obj T) (T, error) {
	obj.SetManagedFields(nil)
	return obj, nil
}

// Selectors narrows a controller to objects matching a label and a field selector (either
// may be nil), on the server: other objects are never sent. It is for
// controller.Options.ListOptions.
func Selectors(label labels.Selector, field fields.Selector) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		if label != nil {
			o.LabelSelector = label.String()
		}
		if field != nil {
			o.FieldSelector = field.String()
		}
	}
}
