package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/consistency"
)

// Widget is a CRD's Go type written by hand: no code generation, only a DeepCopyObject.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec `json:"spec"`
}

type WidgetSpec struct {
	Size  int      `json:"size"`
	Tags  []string `json:"tags,omitempty"`
	Owner string   `json:"owner,omitempty"`
}

func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Tags = append([]string(nil), w.Spec.Tags...)
	return &out
}

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func widget(name string, size int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": "ns", "name": name},
		"spec":     map[string]any{"size": int64(size), "tags": []any{"a", "b"}},
	}}
}

func TestDynamicConvertsToTheUsersOwnStruct(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"}, widget("small", 1), widget("big", 9))
	bad := widget("bad", 0)
	bad.Object["spec"] = map[string]any{"size": "not a number"}
	if _, err := dyn.Resource(widgets).Namespace("ns").Create(context.Background(), bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	errs := &errorLog{}
	c := testctl.New(t, client.FromDynamic[*Widget](dyn.Resource(widgets).Namespace("ns")), controller.Options[*Widget]{Options: reflect.Options[*Widget]{OnError: errs.add}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]WidgetSpec{}
	for _, w := range c.Store().List() {
		got[w.Name] = w.Spec
	}
	want := map[string]WidgetSpec{"small": {Size: 1, Tags: []string{"a", "b"}}, "big": {Size: 9, Tags: []string{"a", "b"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cached widgets (-want +got):\n%s", diff)
	}
	if convErrs := errs.all(); len(convErrs) != 1 || !errors.Is(convErrs[0], reflect.ErrIncompleteList) || !strings.Contains(convErrs[0].Error(), "ns/bad") {
		t.Errorf("errors = %v, want one incomplete list naming the bad widget", convErrs)
	}
}

// errorLog collects what a controller's error handler receives.
type errorLog struct {
	mu      sync.Mutex
	errs    []error
	changed chan struct{}
}

func (l *errorLog) add(_ context.Context, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
	if l.changed != nil {
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// waitFor waits until an error wrapping target has been received.
func (l *errorLog) waitFor(t *testing.T, target error, what string) error {
	t.Helper()
	deadline := time.After(testwait.Timeout)
	for {
		for _, err := range l.all() {
			if errors.Is(err, target) {
				return err
			}
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("%s: no error wrapping %v within %v; errors: %v", what, target, testwait.Timeout, l.all())
		}
	}
}

// expiringWidgets is a dynamic resource whose watch can be ended with the next watch
// answering 410 Expired, which makes the reflector relist.
type expiringWidgets struct {
	dynamic.ResourceInterface
	watching chan struct{}

	mu      sync.Mutex
	current watch.Interface
	expired bool
}

func (e *expiringWidgets) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.expired {
		e.expired = false
		return nil, apierrors.NewResourceExpired("resource version compacted")
	}
	w, err := e.ResourceInterface.Watch(ctx, opts)
	e.current = w
	select {
	case e.watching <- struct{}{}:
	default:
	}
	return w, err
}

// expire ends the open watch and makes the next one answer 410 Expired.
func (e *expiringWidgets) expire() {
	e.mu.Lock()
	e.expired = true
	w := e.current
	e.mu.Unlock()
	w.Stop()
}

// TestUnconvertibleObjectIsDeletedOnlyWhenTheServerSaysSo keeps DESIGN 18 for
// client.Dynamic: a live widget that stops converting to *Widget, first on the watch and
// then on a relist, is reported to the controller's error handler with the conversion
// error, is never reported deleted and keeps its cached state; once it converts again,
// the cache converges. And DESIGN 15: when the server deletes it while it does not
// convert, the handlers see the deletion, with the last state that converted.
func TestUnconvertibleObjectIsDeletedOnlyWhenTheServerSaysSo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"}, widget("small", 1), widget("big", 9))
	src := &expiringWidgets{ResourceInterface: dyn.Resource(widgets).Namespace("ns"), watching: make(chan struct{}, 1)}
	errs := &errorLog{changed: make(chan struct{}, 1)}
	c := testctl.New(t, client.FromDynamic[*Widget](src), controller.Options[*Widget]{
		Options: reflect.Options[*Widget]{
			OnError: errs.add,
			Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 20},
		},
	})
	events := make(chan event.Event[*Widget], 100)
	if _, err := c.AddHandler("recorder", controller.HandlerFunc[*Widget](func(_ context.Context, e event.Event[*Widget]) { events <- e })); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, src.watching, "the first watch")
	update := func(size any) {
		t.Helper()
		u, err := src.Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.Object["spec"] = map[string]any{"size": size}
		if _, err := src.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bigSize := func() int {
		w, ok := c.Store().GetByName("ns", "big")
		if !ok {
			t.Fatal("big is no longer cached")
		}
		return w.Spec.Size
	}

	// On the watch: reported with the conversion error, cached state kept.
	update("not a number")
	err := errs.waitFor(t, reflect.ErrUnexpectedObject, "the unconvertible watch event")
	if !strings.Contains(err.Error(), "converting Widget ns/big") {
		t.Errorf("error = %v, want the conversion error's detail", err)
	}
	if got := bigSize(); got != 9 {
		t.Errorf("cached big has size %d, want 9, the last state that converted", got)
	}

	// On a relist: reported as an incomplete list, no deletion synthesised.
	src.expire()
	err = errs.waitFor(t, reflect.ErrIncompleteList, "the incomplete relist")
	if !strings.Contains(err.Error(), "converting Widget ns/big") {
		t.Errorf("error = %v, want the conversion error's detail", err)
	}
	for {
		e := testwait.Recv(t, events, "the relist's synchronization of small")
		if e.Type == event.Deleted {
			t.Fatalf("%s delivered: an unconvertible live object was reported deleted", e)
		}
		if e.Sync && e.Object.Name == "small" {
			break
		}
	}
	if got := bigSize(); got != 9 {
		t.Errorf("cached big has size %d, want 9, the last state that converted", got)
	}

	// Readable again: the watch brings the cache up to date.
	update(int64(10))
	for {
		e := testwait.Recv(t, events, "big's update once it converts")
		if e.Type == event.Deleted {
			t.Fatalf("%s delivered: an unconvertible live object was reported deleted", e)
		}
		if e.Object.Name == "big" && e.Object.Spec.Size == 10 {
			break
		}
	}
	if got := bigSize(); got != 10 {
		t.Errorf("cached big has size %d, want 10", got)
	}

	// Deleted while it does not convert: the deletion is not lost.
	update("not a number again")
	if err := src.Delete(ctx, "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectBigDeleted(t, events, c.Store(), 10)
}

// expectBigDeleted waits for the widget big's final-state-unknown deletion, delivered with
// the last size that was readable, and checks that it is no longer cached.
func expectBigDeleted(t *testing.T, events <-chan event.Event[*Widget], store interface {
	GetByName(namespace, name string) (*Widget, bool)
}, size int) {
	t.Helper()
	for {
		e := testwait.Recv(t, events, "big's deletion")
		if e.Type != event.Deleted {
			continue
		}
		if e.Object.Name != "big" || !e.FinalStateUnknown || e.Object.Spec.Size != size {
			t.Errorf("delivered %s with size %d, want big's final-state-unknown deletion with size %d", e, e.Object.Spec.Size, size)
		}
		break
	}
	if _, ok := store.GetByName("ns", "big"); ok {
		t.Error("big is still cached after the server deleted it")
	}
}

// nilDynamic is a dynamic resource whose List and Watch return nothing and no error.
type nilDynamic struct {
	dynamic.ResourceInterface
	watch watch.Interface
}

func (nilDynamic) List(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	return nil, nil
}

func (n nilDynamic) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return n.watch, nil
}

type noChannelDynamicWatch struct{}

func (noChannelDynamicWatch) ResultChan() <-chan watch.Event { return nil }
func (noChannelDynamicWatch) Stop()                          {}

// TestDynamicReportsNilFromTheDynamicClient keeps DESIGN 18 at client.Dynamic's own
// boundary: a dynamic client answering List or Watch with nil (or a watch with no
// channel) and no error is an error wrapping reflect.ErrNilResult, not a panic in the
// converting goroutine or a watch that never delivers.
func TestDynamicReportsNilFromTheDynamicClient(t *testing.T) {
	ctx := context.Background()
	if l, err := client.FromDynamic[*Widget](nilDynamic{}).List(ctx, metav1.ListOptions{}); l != nil || !errors.Is(err, reflect.ErrNilResult) {
		t.Errorf("List() = %v, %v; want an error wrapping ErrNilResult", l, err)
	}
	tests := []struct {
		name  string
		watch watch.Interface
	}{
		{name: "nil watch"},
		{name: "typed-nil watch", watch: (*watch.FakeWatcher)(nil)},
		{name: "watch with no channel", watch: noChannelDynamicWatch{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := client.FromDynamic[*Widget](nilDynamic{watch: tt.watch}).Watch(ctx, metav1.ListOptions{})
			if w != nil || !errors.Is(err, reflect.ErrNilResult) {
				t.Errorf("Watch() = %v, %v; want an error wrapping ErrNilResult", w, err)
			}
		})
	}
}

// A Dynamic over a nil client (FromDynamic's answer to one) lists and watches nothing:
// its List and Watch, called directly, are errors wrapping controller.ErrNilArgument,
// as its other methods are, never a panic.
func TestListAndWatchOfANilDynamicAreErrors(t *testing.T) {
	d := client.FromDynamic[*Widget](nil)
	if l, err := d.List(t.Context(), metav1.ListOptions{}); l != nil || !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("List() = %v, %v; want an error wrapping controller.ErrNilArgument", l, err)
	}
	if w, err := d.Watch(t.Context(), metav1.ListOptions{}); w != nil || !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Watch() = %v, %v; want an error wrapping controller.ErrNilArgument", w, err)
	}
}

// TestListDeepCopyKeepsNilItems: a client.List holding a nil item copies it as nil rather
// than panic in the item's DeepCopyObject.
func TestListDeepCopyKeepsNilItems(t *testing.T) {
	l := &client.List[*Widget]{Items: []*Widget{nil, {ObjectMeta: metav1.ObjectMeta{Name: "a"}}}}
	got := l.DeepCopyObject().(*client.List[*Widget])
	if diff := cmp.Diff(l, got); diff != "" {
		t.Errorf("DeepCopyObject (-want +got):\n%s", diff)
	}
}

func TestDynamicWatchConvertsAndStopsWithAnEventUnread(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"})
	widgetsInNS := dyn.Resource(widgets).Namespace("ns")
	src := client.FromDynamic[*Widget](widgetsInNS)
	w, err := src.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"read", "unread"} {
		if _, err := widgetsInNS.Create(ctx, widget(name, 3), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e := testwait.Recv(t, w.ResultChan(), "the first watch event")
	got, ok := e.Object.(*Widget)
	if !ok {
		t.Fatalf("watch delivered %T, want *Widget", e.Object)
	}
	if diff := cmp.Diff(WidgetSpec{Size: 3, Tags: []string{"a", "b"}}, got.Spec); diff != "" || e.Type != watch.Added || got.Name != "read" {
		t.Errorf("first event = %s %s, spec (-want +got):\n%s", e.Type, got.Name, diff)
	}
	// The second event is never read: Stop must still end the converting goroutine and
	// close the result channel.
	w.Stop()
	w.Stop()
	goleak.VerifyNone(t)
	// A closed channel gives the zero event.
	if e := testwait.Recv(t, w.ResultChan(), "the result channel closes after Stop"); e.Type != "" {
		t.Errorf("after Stop the watch delivered %s, want a closed channel", e.Type)
	}
}

func TestStripManagedFields(t *testing.T) {
	o := cm("a", "1")
	o.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	got, err := client.StripManagedFields(o)
	if err != nil || got.ManagedFields != nil {
		t.Errorf("StripManagedFields() = %v, %v; want no managed fields", got.ManagedFields, err)
	}
}

func TestSelectorsNarrowWhatIsCached(t *testing.T) {
	labelled := cm("in", "1")
	labelled.Labels = map[string]string{"mirror": "true"}
	src := fake.New[obj, list](labelled, cm("out", "1"))
	c := testctl.New(t, src, controller.Options[obj]{Options: reflect.Options[obj]{ListOptions: client.Selectors(labels.SelectorFromSet(labels.Set{"mirror": "true"}), nil)}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ns/in"}, c.Store().Keys()); diff != "" {
		t.Errorf("cached keys (-want +got):\n%s", diff)
	}
	if got := src.Actions()[0].Options.LabelSelector; got != "mirror=true" {
		t.Errorf("list label selector = %q, want mirror=true", got)
	}
}

func TestTerminalWrapsAndIsRecognised(t *testing.T) {
	base := errors.New("invalid spec")
	err := typed.Terminal(base)
	if !typed.IsTerminal(err) || !errors.Is(err, base) || typed.IsTerminal(base) || typed.Terminal(nil) != nil {
		t.Errorf("Terminal/IsTerminal do not wrap as documented: %v", err)
	}
}

// recorded is a consistency.Recorder that keeps the objects it is told were written.
type recorded struct {
	mu      sync.Mutex
	written []string
}

func (r *recorded) Wrote(obj runtime.Object) {
	w := obj.(*Widget)
	r.mu.Lock()
	r.written = append(r.written, w.Name+"@"+w.ResourceVersion)
	r.mu.Unlock()
}

func (r *recorded) Deleted(runtime.Object) {}

// Dynamic's writes record what the server returned for the reconcile their context
// belongs to, so that a Loop reads them back (read-your-writes); a read records nothing,
// nor does a write the server refused.
func TestDynamicWritesAreRecordedForTheReconcile(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"}, widget("small", 1))
	d := client.FromDynamic[*Widget](dyn.Resource(widgets).Namespace("ns"))
	rec := &recorded{}
	ctx := consistency.WithRecorder(context.Background(), rec)
	w, err := d.Get(ctx, "small", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.ResourceVersion = "7"
	if _, err := d.Update(ctx, w, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := &Widget{TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Widget"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "new", ResourceVersion: "8"}}
	if _, err := d.Create(ctx, created, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Create(ctx, created, metav1.CreateOptions{}); err == nil {
		t.Fatal("creating an existing widget succeeded")
	}
	if _, err := d.Patch(ctx, "new", types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"9"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"small@7", "new@8", "new@9"}, rec.written); diff != "" {
		t.Errorf("writes recorded (-want +got):\n%s", diff)
	}
}

// Over the dynamic client, WithoutManagedFields removes managedFields before converting
// each object: listed or watched, it comes without them, and ones that would not convert
// cost nothing.
func TestDynamicWithoutManagedFieldsConvertsNone(t *testing.T) {
	withFields := func(name string, fields any) *unstructured.Unstructured {
		u := widget(name, 1)
		u.Object["metadata"].(map[string]any)["managedFields"] = fields
		return u
	}
	good := []any{map[string]any{"manager": "kubectl", "operation": "Apply"}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"}, withFields("a", good), withFields("broken", "not a list"))
	d := client.FromDynamic[*Widget](dyn.Resource(widgets).Namespace("ns"))
	if l, err := d.List(t.Context(), metav1.ListOptions{}); !errors.Is(err, reflect.ErrIncompleteList) || len(l.Items) != 1 || l.Items[0].ManagedFields == nil {
		t.Fatalf("without the option: List = %v, %v; want a with its managedFields, and the broken one reported", l, err)
	}
	d = d.WithoutManagedFields()
	l, err := d.List(t.Context(), metav1.ListOptions{})
	if err != nil || len(l.Items) != 2 {
		t.Fatalf("List = %v, %v; want both widgets", l, err)
	}
	for _, w := range l.Items {
		if w.ManagedFields != nil || w.Spec.Size != 1 {
			t.Errorf("listed %s with managedFields %v, size %d", w.Name, w.ManagedFields, w.Spec.Size)
		}
	}
	w, err := d.Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := dyn.Resource(widgets).Namespace("ns").Update(t.Context(), withFields("broken", "still not a list"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		e := testwait.Recv(t, w.ResultChan(), "the broken widget's modification")
		got, ok := e.Object.(*Widget)
		if !ok || got.ManagedFields != nil {
			t.Fatalf("watched %s %#v, want a *Widget without managedFields", e.Type, e.Object)
		}
		if e.Type == watch.Modified && got.Name == "broken" {
			break
		}
	}
	var nilDynamic *client.Dynamic[*Widget]
	if nilDynamic.WithoutManagedFields() != nil {
		t.Error("a nil Dynamic gave a Dynamic")
	}
}
