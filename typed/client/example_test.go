package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/client"
)

// Gizmo is a CRD's Go type written by hand: no generated clientset, lister or deep-copy
// beyond one method.
type Gizmo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Replicas int `json:"replicas"`
	} `json:"spec"`
}

func (g *Gizmo) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// FromDynamic watches a custom resource through the dynamic client and hands the
// controller the user's own Go struct.
func ExampleFromDynamic() {
	gizmos := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gizmos: "GizmoList"},
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Gizmo",
			"metadata": map[string]any{"namespace": "lab", "name": "g1"},
			"spec":     map[string]any{"replicas": int64(3)},
		}})
	c, err := controller.New(client.FromDynamic[*Gizmo](dyn.Resource(gizmos).Namespace("lab")), controller.Options[*Gizmo]{})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	_ = c.WaitForSync(ctx)
	g, _ := c.Store().GetByName("lab", "g1")
	fmt.Println(g.Name, "replicas:", g.Spec.Replicas)
	cancel()
	<-done
	// Output: g1 replicas: 3
}

// StripManagedFields drops managedFields before objects are cached, often most of their
// size.
func ExampleStripManagedFields() {
	src := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "big", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}})
	c, err := controller.New(src, controller.Options[*corev1.ConfigMap]{Options: reflect.Options[*corev1.ConfigMap]{Transform: client.StripManagedFields[*corev1.ConfigMap]}})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	_ = c.WaitForSync(ctx)
	cm, _ := c.Store().GetByName("default", "big")
	fmt.Println("managed fields cached:", len(cm.ManagedFields))
	cancel()
	<-done
	// Output: managed fields cached: 0
}

// ForResource caches a custom resource as the user's own Go struct, decoding the server's
// JSON straight into it. Here a stand-in for kube-apiserver serves one Gizmo.
func ExampleForResource() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			<-r.Context().Done() // a watch with nothing to say
			return
		}
		fmt.Fprint(w, `{"apiVersion":"example.com/v1","kind":"GizmoList","metadata":{"resourceVersion":"7"},"items":[
			{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"namespace":"lab","name":"g1","resourceVersion":"5"},"spec":{"replicas":3}}]}`)
	}))
	defer srv.Close()

	gizmos, err := client.ForResource[*Gizmo](&rest.Config{Host: srv.URL}, schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"})
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := controller.New(gizmos("lab"), controller.Options[*Gizmo]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	_ = c.WaitForSync(ctx)
	g, _ := c.Store().GetByName("lab", "g1")
	fmt.Println(g.Kind, g.Name, "replicas:", g.Spec.Replicas)
	cancel()
	<-done
	// Output: Gizmo g1 replicas: 3
}

// A cache over ForResource that does not keep managedFields need not decode them:
// WithoutManagedFields's List and Watch leave them out of the stream before the decoder
// reads it. (A Manager's caches do this by default.)
func ExampleDynamic_WithoutManagedFields() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"apiVersion":"example.com/v1","kind":"GizmoList","metadata":{"resourceVersion":"7"},"items":[
			{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"namespace":"lab","name":"g1","resourceVersion":"5",
			 "managedFields":[{"manager":"kubectl","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:replicas":{}}}}]},
			 "spec":{"replicas":3}}]}`)
	}))
	defer srv.Close()

	gizmos, err := client.ForResource[*Gizmo](&rest.Config{Host: srv.URL}, schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, lw := range []*client.Dynamic[*Gizmo]{gizmos("lab"), gizmos("lab").WithoutManagedFields()} {
		l, err := lw.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(l.Items[0].Name, "managedFields:", len(l.Items[0].ManagedFields))
	}
	// Output:
	// g1 managedFields: 1
	// g1 managedFields: 0
}
