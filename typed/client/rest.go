package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	sigsjson "sigs.k8s.io/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
)

// ForResource returns, for each namespace ("" for all namespaces or a cluster-scoped
// resource), a *Dynamic[T] of the resource gvr on the server that cfg names, whose List
// and Watch decode the server's JSON straight into T and a List[T], as a generated
// client does, with no map[string]interface{} and no conversion in between: for a custom
// resource's Go struct it is the fast way to feed a cache (see the README's benchmarks).
// The list is decoded as it arrives, item by item, so that the whole response is never
// held in memory beside the decoded items. Writes go through the dynamic client, over the
// same connection.
//
// Decoding keeps FromDynamic's guarantees: a list item that does not decode into T makes
// List return the others with an error wrapping reflect.ErrIncompleteList that names it,
// so nothing is deleted on that list; a watched object that does not decode arrives as a
// *reflect.Unreadable carrying the error and the object's identity, so that the reflector
// reports it, keeps the cached state, and still records a deletion the server announced.
// A response that is not JSON at all fails the List, or ends the watch with an ERROR
// event, which the reflector reports before it lists or watches again.
func ForResource[T event.Object](cfg *rest.Config, gvr schema.GroupVersionResource) (func(namespace string) *Dynamic[T], error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: the rest.Config of ForResource", controller.ErrNilArgument)
	}
	rc, err := rest.UnversionedRESTClientFor(dynamic.ConfigFor(cfg))
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", gvr, err)
	}
	return FromREST[T](rc, gvr), nil
}

// FromREST is ForResource over a REST client of the server made with
// dynamic.ConfigFor's configuration, such as
// rest.UnversionedRESTClientFor(dynamic.ConfigFor(cfg)): the connection it shares is the
// caller's. A nil client gives nil adapters, which controller.New refuses with
// controller.ErrNilArgument.
func FromREST[T event.Object](rc rest.Interface, gvr schema.GroupVersionResource) func(namespace string) *Dynamic[T] {
	dyn := FromDynamicNamespaced[T](nil)
	if !guard.IsNil(rc) {
		dyn = FromDynamicNamespaced[T](dynamic.New(rc).Resource(gvr))
	}
	return func(namespace string) *Dynamic[T] {
		d := dyn(namespace)
		if d != nil {
			d.direct = &direct{client: rc, path: resourcePath(gvr, namespace)}
		}
		return d
	}
}

// direct reads a resource with a REST client, decoding its JSON straight into T.
type direct struct {
	client rest.Interface
	path   []string // the resource's URL path, /apis/group/version[/namespaces/ns]/resource
}

// resourcePath is the path of gvr's objects in namespace, as the dynamic client builds it.
func resourcePath(gvr schema.GroupVersionResource, namespace string) []string {
	p := []string{"/apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		p = []string{"/api", gvr.Version}
	}
	if namespace != "" {
		p = append(p, "namespaces", namespace)
	}
	return append(p, gvr.Resource)
}

// request is a GET of the resource with opts, asking for JSON, which the decoders read.
func (d *direct) request(opts *metav1.ListOptions) *rest.Request {
	return d.client.Get().AbsPath(d.path...).
		SpecificallyVersionedParams(opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
		SetHeader("Accept", "application/json")
}

func listDirect[T event.Object](ctx context.Context, d *direct, opts metav1.ListOptions, omitManagedFields bool) (*List[T], error) {
	opts.Watch = false
	body, err := d.request(&opts).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	return decodeList[T](body, omitManagedFields)
}

// decodeList decodes a list response from r, each item straight into a new T. A value
// that is not JSON fails it as a whole; an item that is JSON but does not decode into T
// (a string where T has a number, a time that does not parse) is left out and named in an
// error wrapping reflect.ErrIncompleteList returned with the list of the others. With
// omitManagedFields, the items' managedFields are not decoded (see omitter).
func decodeList[T event.Object](r io.Reader, omitManagedFields bool) (*List[T], error) {
	body := &readErr{r: r}
	var in io.Reader = body
	if omitManagedFields {
		in = newOmitter(body, listManagedFields)
	}
	dec := sigsjson.NewDecoderCaseSensitivePreserveInts(in)
	out := &List[T]{}
	var errs []error
	n := 0
	err := walkObject(dec, func(key string) error {
		switch key {
		case "apiVersion":
			return dec.Decode(&out.APIVersion)
		case "kind":
			return dec.Decode(&out.Kind)
		case "metadata":
			return dec.Decode(&out.ListMeta)
		case "items":
			return walkArray(dec, func() error {
				n++
				obj := New[T]()
				err := dec.Decode(obj)
				switch syntax, _ := sigsjson.SyntaxErrorOffset(err); {
				case err == nil:
					out.Items = append(out.Items, obj)
				case syntax || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || body.err != nil:
					return err // the item could not be read: the stream is broken
				default:
					// The item was read whole but does not fit T; the decoder goes on
					// after it.
					errs = append(errs, fmt.Errorf("decoding item %d (%s %s/%s) into %T: %w", n-1, obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName(), obj, err))
				}
				return nil
			})
		default:
			var skip rawJSON
			return dec.Decode(&skip)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("decoding the list: %w", errors.Join(append([]error{err}, errs...)...))
	}
	if errs != nil {
		return out, fmt.Errorf("%w: %d of %d items did not decode: %w", reflect.ErrIncompleteList, len(errs), n, errors.Join(errs...))
	}
	return out, nil
}

// readErr remembers the first error of its reader other than the end of the input, so
// that a decoding error can be told from a broken stream.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// walkObject reads a JSON object's opening brace, calls field with each key, which must
// read its value, and reads the closing brace.
func walkObject(dec sigsjson.Decoder, field func(key string) error) error {
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if err := field(key); err != nil {
			return fmt.Errorf("field %q: %w", key, err)
		}
	}
	return expectDelim(dec, '}')
}

// walkArray reads a JSON array, calling item for each element, which must read it and
// return an error only when it could not, or a JSON null.
func walkArray(dec sigsjson.Decoder, item func() error) error {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if d, ok := tok.(interface{ String() string }); !ok || d.String() != "[" {
		return fmt.Errorf("got %v, want an array", tok)
	}
	for dec.More() {
		if err := item(); err != nil {
			return err
		}
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec sigsjson.Decoder, want rune) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(interface{ String() string }); !ok || d.String() != string(want) {
		return fmt.Errorf("got %v, want %q", tok, want)
	}
	return nil
}

func watchDirect[T event.Object](ctx context.Context, d *direct, opts metav1.ListOptions, omitManagedFields bool) (watch.Interface, error) {
	opts.Watch = true
	body, err := d.request(&opts).Stream(ctx)
	if err != nil {
		return nil, err
	}
	r := &readErr{r: body}
	var in io.Reader = r
	if omitManagedFields {
		in = newOmitter(r, watchManagedFields)
	}
	return watch.NewStreamWatcher(&watchDecoder[T]{body: body, read: r, dec: sigsjson.NewDecoderCaseSensitivePreserveInts(in)},
		// 500: the cause of a stream that does not decode is not known, as client-go says.
		apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
}

// watchDecoder decodes a watch stream's events, each object straight into a new T, for
// watch.StreamWatcher. The server writes an event's type before its object, so the
// object is decoded in the same pass that reads it; an object that comes first is kept
// as raw JSON until the type is known.
type watchDecoder[T event.Object] struct {
	body io.ReadCloser
	read *readErr // body, remembering its errors
	dec  sigsjson.Decoder
	raw  rawJSON // reused from one event to the next
}

// rawJSON is a JSON value kept as it is, in a buffer reused from one event to the next.
type rawJSON []byte

// UnmarshalJSON keeps a copy of data.
func (r *rawJSON) UnmarshalJSON(data []byte) error {
	*r = append((*r)[:0], data...)
	return nil
}

// Decode returns the next event. An object that is JSON but does not decode into T is a
// *reflect.Unreadable with the decoding error and, as its Object, the object's identity;
// an error ends the watch (StreamWatcher sends it as an ERROR event unless it is the
// stream's end).
func (w *watchDecoder[T]) Decode() (watch.EventType, runtime.Object, error) {
	var typ watch.EventType
	var obj runtime.Object
	var objErr error
	raw := false
	err := walkObject(w.dec, func(key string) error {
		switch {
		case key == "type":
			return w.dec.Decode(&typ)
		case key == "object" && typ == "":
			raw = true
			return w.dec.Decode(&w.raw)
		case key == "object":
			var err error
			obj, objErr, err = w.object(typ, func(into any) error { return w.dec.Decode(into) })
			return err
		default:
			var skip rawJSON
			return w.dec.Decode(&skip)
		}
	})
	if err == nil && raw {
		obj, objErr, err = w.object(typ, func(into any) error { return sigsjson.UnmarshalCaseSensitivePreserveInts(w.raw, into) })
	}
	switch {
	case err != nil:
		return "", nil, err
	case obj == nil:
		return "", nil, fmt.Errorf("a watch %q event without an object", typ)
	case objErr != nil:
		return typ, unreadable(obj.(T), objErr), nil // object returns a T with objErr
	}
	return typ, obj, nil
}

// object decodes an event's object of type typ with decode: a *metav1.Status for an
// ERROR event, a new T otherwise. A T that does not decode is returned, as far as it
// decoded, with the error as objErr; err is an error that ends the watch: a type that
// is not a watch event's, a status that does not decode, a stream that is broken.
func (w *watchDecoder[T]) object(typ watch.EventType, decode func(into any) error) (obj runtime.Object, objErr, err error) {
	switch typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
	case watch.Error:
		status := &metav1.Status{}
		if err := decode(status); err != nil {
			return nil, nil, fmt.Errorf("decoding a watch ERROR event's status: %w", err)
		}
		return status, nil, nil
	default:
		return nil, nil, fmt.Errorf("got invalid watch event type: %q", typ)
	}
	o := New[T]()
	err = decode(o)
	if syntax, _ := sigsjson.SyntaxErrorOffset(err); syntax || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || w.read.err != nil {
		return nil, nil, err // the object could not be read: the stream is broken
	}
	return o, err, nil
}

// unreadable is the Unreadable of obj, a T decoded as far as it could be, which err
// stopped: its Object carries the identity obj got, for a deletion to be recorded.
func unreadable[T event.Object](obj T, err error) *reflect.Unreadable {
	gvk := obj.GetObjectKind().GroupVersionKind()
	id := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}}
	id.Namespace, id.Name, id.UID, id.ResourceVersion = obj.GetNamespace(), obj.GetName(), obj.GetUID(), obj.GetResourceVersion()
	id.Labels, id.Annotations = obj.GetLabels(), obj.GetAnnotations()
	return &reflect.Unreadable{Object: id, Err: fmt.Errorf("decoding %s %s/%s into %T: %w", id.Kind, id.Namespace, id.Name, obj, err)}
}

// Close closes the stream, which ends a Decode waiting for it.
func (w *watchDecoder[T]) Close() { _ = w.body.Close() }
