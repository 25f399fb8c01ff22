package write_test

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/write"
)

// Generated typed clients are the writers' clients as they are, with no adapter.
var (
	_ write.Patcher[*appsv1.Deployment]       = appsv1client.DeploymentInterface(nil)
	_ write.StatusUpdater[*appsv1.Deployment] = appsv1client.DeploymentInterface(nil)
	_ write.OwnedClient[*appsv1.Deployment]   = appsv1client.DeploymentInterface(nil)
	_ write.Patcher[*Gadget]                  = (*client.Dynamic[*Gadget])(nil)
	_ write.StatusUpdater[*Gadget]            = (*client.Dynamic[*Gadget])(nil)
	_ write.OwnedClient[*Gadget]              = (*client.Dynamic[*Gadget])(nil)
)

// Gadget is a custom resource's Go struct with a status. Its DeepCopyObject copies only
// the top level, as hand-written ones often do, so the status's conditions and the spec's
// labels are shared with the copy: the writers must not depend on a deep DeepCopyObject.
type Gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GadgetSpec   `json:"spec"`
	Status            GadgetStatus `json:"status,omitempty"`
}

type GadgetSpec struct {
	Size   int               `json:"size"`
	Labels map[string]string `json:"labels,omitempty"`
}

type GadgetStatus struct {
	Ready              bool               `json:"ready,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

func (g *Gadget) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

var (
	gadgetGVR  = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}
	gadgetKind = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}
	gadgetMeta = metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Gadget"}
	deployKind = appsv1.SchemeGroupVersion.WithKind("Deployment")
)

func gadgetStatus(g *Gadget) *GadgetStatus { return &g.Status }

// fakeGadgets returns a dynamic fake serving gadgets, holding objs.
func fakeGadgets(t *testing.T, objs ...*Gadget) *dynamicfake.FakeDynamicClient {
	t.Helper()
	var us []runtime.Object
	for _, g := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(g)
		if err != nil {
			t.Fatal(err)
		}
		us = append(us, &unstructured.Unstructured{Object: m})
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gadgetGVR: "GadgetList"}, us...)
}

// storedGadget reads a gadget from the dynamic fake's tracker, bypassing its reactors.
func storedGadget(t *testing.T, dyn *dynamicfake.FakeDynamicClient, namespace, name string) *Gadget {
	t.Helper()
	obj, err := dyn.Tracker().Get(gadgetGVR, namespace, name)
	if err != nil {
		t.Fatalf("reading gadget %s/%s from the fake: %v", namespace, name, err)
	}
	var g Gadget
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// apiCalls returns the API calls a fake client received, each as
// "verb resource[/subresource] namespace/name".
func apiCalls(f *k8stesting.Fake) []string {
	var out []string
	for _, a := range f.Actions() {
		resource := a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			resource += "/" + sub
		}
		out = append(out, fmt.Sprintf("%s %s %s/%s", a.GetVerb(), resource, a.GetNamespace(), actionName(a)))
	}
	return out
}

// actionName returns the name of the object an action is about.
func actionName(a k8stesting.Action) string {
	switch a := a.(type) {
	case interface{ GetName() string }:
		return a.GetName()
	case interface{ GetObject() runtime.Object }:
		if m, ok := a.GetObject().(metav1.Object); ok {
			return m.GetName()
		}
	}
	return ""
}

// patches returns the bodies of the patches a fake client received.
func patches(f *k8stesting.Fake) []string {
	var out []string
	for _, a := range f.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

// written returns the objects a fake client received in creates and updates, in order.
func written[T runtime.Object](t *testing.T, f *k8stesting.Fake) []T {
	t.Helper()
	var out []T
	for _, a := range f.Actions() {
		if w, ok := a.(interface{ GetObject() runtime.Object }); ok {
			obj, ok := w.GetObject().(T)
			if !ok {
				t.Fatalf("a %s wrote a %T, want a %T", a.GetVerb(), w.GetObject(), obj)
			}
			out = append(out, obj)
		}
	}
	return out
}

// failFirst returns a reactor that fails the first n calls of verb on subresource (""
// for the object itself) with the error err returns, calling before first if it is not
// nil (to change the stored object as another writer would); n < 0 fails every call.
// Other calls go on to the next reactor.
func failFirst(n int, verb, subresource string, err func(name string) error, before func()) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() != verb || a.GetSubresource() != subresource || n == 0 {
			return false, nil, nil
		}
		n--
		if before != nil {
			before()
		}
		return true, nil, err(actionName(a))
	}
}

func conflict(resource string) func(string) error {
	return func(name string) error {
		return apierrors.NewConflict(schema.GroupResource{Resource: resource}, name, fmt.Errorf("the object has been modified"))
	}
}

func notFound(resource string) func(string) error {
	return func(name string) error { return apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name) }
}

func alreadyExists(resource string) func(string) error {
	return func(name string) error {
		return apierrors.NewAlreadyExists(schema.GroupResource{Resource: resource}, name)
	}
}

// repeat returns vs n times over.
func repeat[T any](n int, vs ...T) []T {
	var out []T
	for range n {
		out = append(out, vs...)
	}
	return out
}
