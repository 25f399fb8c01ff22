package client_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed/client"
)

// intentSpec is a custom resource's spec with a required field (no omitempty) and
// optional ones.
type intentSpec struct {
	Message  string            `json:"message"`
	Replicas *int32            `json:"replicas,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Ports    []int32           `json:"ports,omitempty"`
	Hosts    []string          `json:"hosts"`
	Extra    intentExtra       `json:"extra,omitempty"`
	Items    []intentExtra     `json:"items,omitempty"`
}

type intentExtra struct {
	Note string            `json:"note,omitempty"`
	Tags map[string]string `json:"tags"`
}

type intentObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              intentSpec `json:"spec"`
	Status            struct {
		Ready bool `json:"ready,omitempty"`
	} `json:"status,omitempty"`
}

// DESIGN 20, "apply claims only the fields the user set": an intent is the struct's JSON
// without nulls and empty objects, recursively. What the user did not set (nil pointers,
// maps and slices, structs with nothing set, metadata.creationTimestamp) is not in it;
// what they set is, and so are the zero values of required fields (no omitempty).
func TestIntentKeepsOnlyWhatWasSet(t *testing.T) {
	meta := metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Thing"}
	tests := []struct {
		name string
		obj  any
		want map[string]any
	}{{
		name: "nothing set but the name: the required field stays, zero",
		obj:  &intentObject{TypeMeta: meta, ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		want: map[string]any{"apiVersion": "example.com/v1", "kind": "Thing", "metadata": map[string]any{"name": "a"},
			"spec": map[string]any{"message": ""}},
	}, {
		name: "what was set stays: zero pointers, empty items, and an empty list unless omitempty drops it",
		obj: &intentObject{TypeMeta: meta, ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "n"},
			Spec: intentSpec{Message: "hi", Replicas: ptr.To[int32](0), Ports: []int32{}, Hosts: []string{}, Items: []intentExtra{{Note: "x"}, {}}}},
		want: map[string]any{"apiVersion": "example.com/v1", "kind": "Thing", "metadata": map[string]any{"name": "a", "namespace": "n"},
			"spec": map[string]any{"message": "hi", "replicas": int64(0), "hosts": []any{},
				"items": []any{map[string]any{"note": "x"}, map[string]any{}}}},
	}, {
		name: "a built-in kind's struct: unset containers' resources and the status are not claimed",
		obj: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}},
		want: map[string]any{"metadata": map[string]any{"name": "web"}, "spec": map[string]any{
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": "nginx"}}}}}},
	}, {
		name: "an unstructured object is pruned too, and not changed",
		obj: &unstructured.Unstructured{Object: map[string]any{"kind": "Thing", "metadata": map[string]any{"name": "a", "labels": nil},
			"spec": map[string]any{"a": map[string]any{"b": nil}}}},
		want: map[string]any{"kind": "Thing", "metadata": map[string]any{"name": "a"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before []byte
			if u, ok := tt.obj.(*unstructured.Unstructured); ok {
				before, _ = u.MarshalJSON()
			}
			got, err := client.Intent(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.Object); diff != "" {
				t.Errorf("intent (-want +got):\n%s", diff)
			}
			if u, ok := tt.obj.(*unstructured.Unstructured); ok {
				if after, _ := u.MarshalJSON(); string(after) != string(before) {
					t.Errorf("Intent changed its argument: %s, then %s", before, after)
				}
			}
		})
	}
	var typedNil *intentObject
	for _, obj := range []any{nil, typedNil} {
		if _, err := client.Intent(obj); !errors.Is(err, controller.ErrNilArgument) {
			t.Errorf("Intent(%#v) gave %v, want controller.ErrNilArgument", obj, err)
		}
	}
}
