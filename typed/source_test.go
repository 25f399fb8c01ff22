package typed_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/typed"
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
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"}, widget("small", 1), widget("big", 9))
	bad := widget("bad", 0)
	bad.Object["spec"] = map[string]any{"size": "not a number"}
	if _, err := client.Resource(widgets).Namespace("ns").Create(context.Background(), bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var convErrs []error
	src := typed.FromDynamic[*Widget](client.Resource(widgets).Namespace("ns"))
	src.OnError = func(err error) { convErrs = append(convErrs, err) }
	c := controller.New[*Widget, *typed.List[*Widget]](src)
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
	if len(convErrs) != 1 {
		t.Errorf("conversion errors = %v, want one for the bad widget", convErrs)
	}
}

func TestDynamicWatchConvertsAndStopsWithAnEventUnread(t *testing.T) {
	ctx := context.Background()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"})
	widgetsInNS := client.Resource(widgets).Namespace("ns")
	src := typed.FromDynamic[*Widget](widgetsInNS)
	w, err := src.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"read", "unread"} {
		if _, err := widgetsInNS.Create(ctx, widget(name, 3), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e := receive(t, w.ResultChan(), "the first watch event")
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
	verifyNoLeaks(t)
	// A closed channel gives the zero event.
	if e := receive(t, w.ResultChan(), "the result channel closes after Stop"); e.Type != "" {
		t.Errorf("after Stop the watch delivered %s, want a closed channel", e.Type)
	}
}

func TestStripManagedFields(t *testing.T) {
	o := cm("a", "1")
	o.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	got, err := typed.StripManagedFields(o)
	if err != nil || got.ManagedFields != nil {
		t.Errorf("StripManagedFields() = %v, %v; want no managed fields", got.ManagedFields, err)
	}
}

func TestSelectorsNarrowWhatIsCached(t *testing.T) {
	labelled := cm("in", "1")
	labelled.Labels = map[string]string{"mirror": "true"}
	src := fake.New[obj, list](labelled, cm("out", "1"))
	c := controller.New[obj, list](src, typed.Selectors(labels.SelectorFromSet(labels.Set{"mirror": "true"}), nil))
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
