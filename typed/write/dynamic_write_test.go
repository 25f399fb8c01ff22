package write_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/write"
)

// dynamicCalls are the Dynamic's methods, each called on obj (or its name); sends says
// whether the method sends obj.
var dynamicCalls = []struct {
	name  string
	sends bool
	call  func(ctx context.Context, d *client.Dynamic[*Gadget], obj *Gadget) (*Gadget, error)
}{
	{"Create", true, func(ctx context.Context, d *client.Dynamic[*Gadget], obj *Gadget) (*Gadget, error) {
		return d.Create(ctx, obj, metav1.CreateOptions{})
	}},
	{"Get", false, func(ctx context.Context, d *client.Dynamic[*Gadget], obj *Gadget) (*Gadget, error) {
		return d.Get(ctx, obj.Name, metav1.GetOptions{})
	}},
	{"Update", true, func(ctx context.Context, d *client.Dynamic[*Gadget], obj *Gadget) (*Gadget, error) {
		return d.Update(ctx, obj, metav1.UpdateOptions{})
	}},
	{"UpdateStatus", true, func(ctx context.Context, d *client.Dynamic[*Gadget], obj *Gadget) (*Gadget, error) {
		return d.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	}},
	{"Patch", false, func(ctx context.Context, d *client.Dynamic[*Gadget], obj *Gadget) (*Gadget, error) {
		return d.Patch(ctx, obj.Name, types.MergePatchType, []byte(`{"spec":{"size":2}}`), metav1.PatchOptions{})
	}},
}

func TestDynamicWritesAndReadsTheUsersOwnStruct(t *testing.T) {
	dyn := fakeGadgets(t)
	gadgets := client.FromDynamicNamespaced[*Gadget](dyn.Resource(gadgetGVR))("lab")
	g := &Gadget{TypeMeta: gadgetMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "g"},
		Spec: GadgetSpec{Size: 1}, Status: GadgetStatus{Ready: true}}
	want := &Gadget{TypeMeta: gadgetMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "g"},
		Spec: GadgetSpec{Size: 1}, Status: GadgetStatus{Ready: true}}
	for _, c := range dynamicCalls {
		got, err := c.call(t.Context(), gadgets, g)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.name == "Patch" {
			want.Spec.Size = 2
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s returned (-want +got):\n%s", c.name, diff)
		}
	}
	calls := []string{"create gadgets lab/g", "get gadgets lab/g", "update gadgets lab/g", "update gadgets/status lab/g", "patch gadgets lab/g"}
	if diff := cmp.Diff(calls, apiCalls(&dyn.Fake)); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}

func TestDynamicWriteBadInputIsAnErrorWithoutAnAPICall(t *testing.T) {
	dyn := fakeGadgets(t)
	gadgets := client.FromDynamic[*Gadget](dyn.Resource(gadgetGVR).Namespace("lab"))
	noKind := &Gadget{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "g"}}
	for _, c := range dynamicCalls {
		if !c.sends {
			continue
		}
		t.Run(c.name+" of an object without apiVersion and kind", func(t *testing.T) {
			if _, err := c.call(t.Context(), gadgets, noKind); err == nil {
				t.Errorf("%s succeeded", c.name)
			}
		})
		t.Run(c.name+" of a nil object", func(t *testing.T) {
			if _, err := c.call(t.Context(), gadgets, nil); !errors.Is(err, controller.ErrNilArgument) {
				t.Errorf("%s returned %v, want an error wrapping ErrNilArgument", c.name, err)
			}
		})
	}
	if calls := apiCalls(&dyn.Fake); len(calls) != 0 {
		t.Errorf("API calls were made: %v", calls)
	}
	for _, c := range dynamicCalls {
		t.Run(c.name+" through a nil client", func(t *testing.T) {
			if _, err := c.call(t.Context(), client.FromDynamicNamespaced[*Gadget](nil)("lab"), noKind); !errors.Is(err, controller.ErrNilArgument) {
				t.Errorf("%s returned %v, want an error wrapping ErrNilArgument", c.name, err)
			}
		})
	}
}

// A dynamic client that answers with a nil object and no error makes each of the
// Dynamic's calls an error wrapping the write side's ErrNilObject (client.ErrNilObject is
// the same variable), not the reflector's ErrNilResult, and a writer over it returns a
// WriteError wrapping it.
func TestDynamicWriteReportsANilResultFromTheDynamicClient(t *testing.T) {
	dyn := fakeGadgets(t)
	dyn.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
	gadgets := client.FromDynamic[*Gadget](dyn.Resource(gadgetGVR).Namespace("lab"))
	g := &Gadget{TypeMeta: gadgetMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "g"}}
	for _, c := range dynamicCalls {
		got, err := c.call(t.Context(), gadgets, g)
		if got != nil || !errors.Is(err, write.ErrNilObject) || !errors.Is(err, client.ErrNilObject) || errors.Is(err, reflect.ErrNilResult) {
			t.Errorf("%s = %v, %v; want an error wrapping write.ErrNilObject (client.ErrNilObject), not reflect.ErrNilResult", c.name, got, err)
		}
	}
	f := write.NewFinalizer(client.FromDynamicNamespaced[*Gadget](dyn.Resource(gadgetGVR)), cleanupFinalizer,
		func(context.Context, *Gadget) error { return nil })
	_, err := f.Handle(t.Context(), typed.Request[*Gadget]{Key: "lab/g", Object: g})
	var we *write.WriteError
	if !errors.Is(err, write.ErrNilObject) || !errors.As(err, &we) || we.Name != "g" {
		t.Errorf("Finalizer.Handle over the dynamic client = %v, want a WriteError naming g, wrapping write.ErrNilObject", err)
	}
}

func TestClusterScopedServesEveryNamespaceWithTheOneClient(t *testing.T) {
	cs := kubefake.NewClientset()
	nodes := write.ClusterScoped(cs.CoreV1().Nodes())
	f := write.NewFinalizer(nodes, cleanupFinalizer, func(context.Context, *corev1.Node) error { return nil })
	if _, err := cs.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1"}}
	if _, err := f.Handle(t.Context(), typed.Request[*corev1.Node]{Key: "n1", Name: "n1", Object: node}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"patch nodes /n1"}, apiCalls(&cs.Fake)); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}
