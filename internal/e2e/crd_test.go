package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

type (
	u     = *unstructured.Unstructured
	uList = *unstructured.UnstructuredList
)

// Widget is the Go type, written by hand, of the custom resource the tests install
// (installWidgetCRD): they watch it either as unstructured objects or as this struct.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec `json:"spec"`
}

type WidgetSpec struct {
	Size  int    `json:"size"`
	Color string `json:"color,omitempty"`
	Owner string `json:"owner,omitempty"`
}

func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

var (
	crdGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	widgetGVR = schema.GroupVersionResource{Group: "e2e.typedinformer.io", Version: "v1", Resource: "widgets"}
)

// installWidgetCRD creates a namespaced CRD for widgets.e2e.typedinformer.io (the Widget
// type), through the dynamic client so that no apiextensions client module is needed, and
// waits until it is established and its resources can be listed.
func installWidgetCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": widgetGVR.Resource + "." + widgetGVR.Group},
		"spec": map[string]any{
			"group": widgetGVR.Group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{
				"name": widgetGVR.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{"spec": map[string]any{
						"type": "object",
						"properties": map[string]any{
							"size":  map[string]any{"type": "integer"},
							"color": map[string]any{"type": "string"},
							"owner": map[string]any{"type": "string"},
						},
					}},
				}},
			}},
		},
	}}
	if _, err := dyn.Resource(crdGVR).Create(timeout(t), crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the CRD: %v", err)
	}
	waitFor(t, "the CRD to be established", func() bool {
		var got u
		if !try(t, func(ctx context.Context) (err error) {
			got, err = dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
			return err
		}) {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				return true
			}
		}
		return false
	})
	// The resource's handler can lag slightly behind the Established condition.
	waitFor(t, "widgets to be served", func() bool {
		return try(t, func(ctx context.Context) error {
			_, err := dyn.Resource(widgetGVR).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		})
	})
}

func widget(ns, name string, spec map[string]any) u {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": widgetGVR.GroupVersion().String(),
		"kind":       "Widget",
		"metadata":   map[string]any{"namespace": ns, "name": name},
		"spec":       spec,
	}}
}

func listWidgets(dyn dynamic.Interface) func(context.Context) ([]u, error) {
	return func(ctx context.Context) ([]u, error) {
		return listed[u](dyn.Resource(widgetGVR).Namespace("").List(ctx, metav1.ListOptions{}))
	}
}

// TestCustomResourcesThroughDynamicClient watches custom resources as
// *unstructured.Unstructured through the dynamic client, with no code generation.
func TestCustomResourcesThroughDynamicClient(t *testing.T) {
	namespaces := []string{"crd-a", "crd-b"}
	cp, admin := setUp(t, namespaces...)
	installWidgetCRD(t, admin.dyn)

	// Some widgets exist before the controller starts, the rest are created while it runs.
	widgets := func(ns string) dynamic.ResourceInterface { return admin.dyn.Resource(widgetGVR).Namespace(ns) }
	lastSpec := map[string]map[string]any{} // key -> spec last written
	create := func(ns, name string, size int64) {
		t.Helper()
		spec := map[string]any{"size": size, "owner": name}
		if _, err := widgets(ns).Create(timeout(t), widget(ns, name, spec), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating widget %s/%s: %v", ns, name, err)
		}
		lastSpec[ns+"/"+name] = spec
	}
	update := func(ns, name string, size int64) {
		t.Helper()
		obj, err := widgets(ns).Get(timeout(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(obj.Object, size, "spec", "size"); err != nil {
			t.Fatal(err)
		}
		if obj, err = widgets(ns).Update(timeout(t), obj, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("updating widget %s/%s: %v", ns, name, err)
		}
		lastSpec[ns+"/"+name], _, _ = unstructured.NestedMap(obj.Object, "spec")
	}
	for _, ns := range namespaces {
		for i := range 5 {
			create(ns, fmt.Sprintf("w-%02d", i), 1)
		}
	}

	errs := &errorLog{}
	c := testctl.New(t, newClients(t, cp.AdminConfig()).dyn.Resource(widgetGVR).Namespace(""), controller.Options[u]{Options: reflect.Options[u]{OnError: errs.handle}})
	h := eventcheck.New[u]("checker")
	reg := registered(t)(c.AddHandler("checker", h))
	stop := start(t, c)
	waitSynced(t, "the handler", reg.Synced())
	if got := c.Store().Len(); got != 10 {
		t.Errorf("synced with %d widgets, want 10", got)
	}

	var gone []string
	deletedSpec := map[string]map[string]any{}
	for _, ns := range namespaces {
		for i := 5; i < 15; i++ {
			create(ns, fmt.Sprintf("w-%02d", i), 1)
		}
		for i := 0; i < 15; i += 2 {
			update(ns, fmt.Sprintf("w-%02d", i), int64(10+i))
		}
		for i := 0; i < 15; i += 3 {
			name := fmt.Sprintf("w-%02d", i)
			if err := widgets(ns).Delete(timeout(t), name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			gone = append(gone, ns+"/"+name)
			deletedSpec[ns+"/"+name] = lastSpec[ns+"/"+name]
		}
	}

	list := listWidgets(admin.dyn)
	converge(t, list, storeView(c.Store()), handlerView(h))
	stop()
	assertMatchesServer(t, list, storeView(c.Store()), handlerView(h))
	h.Verify(t)
	assertDeletionsDelivered(t, c.Store(), h, gone, false)
	for _, key := range gone {
		evs := h.Events(key)
		if len(evs) == 0 || evs[len(evs)-1].Event.Type != event.Deleted {
			continue // reported above
		}
		last := evs[len(evs)-1].Event
		got, _, _ := unstructured.NestedMap(last.Object.Object, "spec")
		if diff := cmp.Diff(deletedSpec[key], got); diff != "" {
			t.Errorf("%v does not carry the spec last written (-written +event):\n%s", last, diff)
		}
	}
	if all := errs.all(); len(all) != 0 {
		t.Errorf("the controller reported errors: %v", all)
	}
}
