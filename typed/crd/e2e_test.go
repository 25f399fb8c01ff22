//go:build unix

package crd_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// TestDefinitionsOnARealServer installs a Definition with two versions
// (v1alpha1 served, v1 served and stored) and the scale subresource on
// kube-apiserver: an object created in one version is read in the other, its
// /scale reads spec and status replicas and the selector, and a write to
// /scale changes spec.replicas. Then: the schemas of every Go type kind are
// accepted and keep what is written; a second Install of the same CRD (an
// upgrade) succeeds; names another CRD holds are ErrNamesNotAccepted.
func TestDefinitionsOnARealServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ext := apiextensionsclient.NewForConfigOrDie(env.AdminConfig())
	dyn := dynamic.NewForConfigOrDie(env.AdminConfig())
	def := &crd.Definition{Group: "scale.example.com", Kind: "Thing", ShortNames: []string{"th"}, Versions: []crd.Version{
		crd.VersionOf[*thing]("v1alpha1", crd.Deprecated("")),
		crd.VersionOf[*thing]("v1", crd.Storage(), crd.Scale(".spec.replicas", ".status.replicas", ".status.selector"),
			crd.Column("Replicas", ".spec.replicas", 0),
			crd.Field(".metadata.name", crd.MaxLength(10)),
			crd.Field(".", crd.Rule("!has(self.spec.replicas) || self.spec.replicas <= 5 || self.spec.name == 'big'", "only a big thing has more than 5 replicas"))),
	}}
	if err := crd.InstallDefinitions(ctx, ext, def); err != nil { // built from the server's OpenAPI
		t.Fatal(err)
	}
	gvr := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "scale.example.com", Version: v, Resource: "things"}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scale.example.com/v1alpha1", "kind": "Thing",
		"metadata": map[string]any{"name": "a", "namespace": "default"},
		"spec":     map[string]any{"name": "a", "replicas": int64(1)},
	}}
	if _, err := dyn.Resource(gvr("v1alpha1")).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Thing in v1alpha1: %v", err)
	}
	got, err := dyn.Resource(gvr("v1")).Namespace("default").Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.GetAPIVersion() != "scale.example.com/v1" {
		t.Fatalf("reading it in v1: %v, %v", got, err)
	}
	status := map[string]any{"replicas": int64(1), "selector": "app=a"}
	if err := unstructured.SetNestedMap(got.Object, status, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(gvr("v1")).Namespace("default").UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing its status: %v", err)
	}

	rc := ext.ApiextensionsV1().RESTClient()
	scalePath := "/apis/scale.example.com/v1/namespaces/default/things/a/scale"
	var scale autoscalingv1.Scale
	raw, err := rc.Get().AbsPath(scalePath).DoRaw(ctx)
	if err == nil {
		err = decode(raw, &scale)
	}
	if err != nil || scale.Spec.Replicas != 1 || scale.Status.Replicas != 1 || scale.Status.Selector != "app=a" {
		t.Fatalf("GET /scale: %+v, %v; want spec and status replicas 1, selector app=a", scale, err)
	}
	scale.Spec.Replicas = 3
	body, err := runtimeEncode(&scale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Put().AbsPath(scalePath).Body(body).SetHeader("Content-Type", "application/json").DoRaw(ctx); err != nil {
		t.Fatalf("PUT /scale: %v", err)
	}
	got, err = dyn.Resource(gvr("v1")).Namespace("default").Get(ctx, "a", metav1.GetOptions{})
	if r, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); err != nil || r != 3 {
		t.Errorf("spec.replicas after scaling to 3: %d, %v", r, err)
	}

	t.Run("a CEL rule at the root and a constraint on metadata.name refuse what they say", func(t *testing.T) {
		for name, want := range map[string]string{"b": "only a big thing has more than 5 replicas", "a-very-long-name": "metadata.name"} {
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "scale.example.com/v1", "kind": "Thing",
				"metadata": map[string]any{"name": name, "namespace": "default"},
				"spec":     map[string]any{"name": "small", "replicas": int64(6)}}}
			if name != "b" {
				obj.Object["spec"] = map[string]any{"name": "small", "replicas": int64(1)}
			}
			_, err := dyn.Resource(gvr("v1")).Namespace("default").Create(ctx, obj, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("creating %s: %v; want Invalid saying %q", name, err, want)
			}
		}
	})
	t.Run("the schema of every Go type kind is accepted, and an object using each is stored as written", func(t *testing.T) {
		d := &crd.Definition{Group: "kinds.example.com", Kind: "Kinds", Plural: "kinds", Versions: []crd.Version{crd.VersionOf[*object[allKinds]]("v1", crd.Storage())}}
		if err := crd.InstallDefinitions(ctx, ext, d); err != nil {
			t.Fatal(err)
		}
		spec := map[string]any{
			"s": "x", "b": true, "i32": int64(-1), "i64": int64(1) << 40, "f": 1.5, "bytes": "aGk=", "list": []any{"a"}, "arr": []any{int64(1), int64(2)},
			"m": map[string]any{"k": int64(1)}, "time": "2026-01-02T03:04:05Z", "micro": "2026-01-02T03:04:05.000006Z", "dur": "1m0s",
			"qty": "500m", "qtyInt": int64(2), "ios": "50%", "iosInt": int64(8), "raw": map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "anything": map[string]any{"x": int64(1)}},
			"json": []any{"any", int64(1)}, "rawMsg": "str",
			"meta": map[string]any{"name": "n", "labels": map[string]any{"a": "b"}, "annotations": map[string]any{"c": "d"}},
			"ptr":  "p", "inner": map[string]any{"x": "y"},
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kinds.example.com/v1", "kind": "Kinds",
			"metadata": map[string]any{"name": "all", "namespace": "default"}, "spec": spec}}
		gvr := schema.GroupVersionResource{Group: "kinds.example.com", Version: "v1", Resource: "kinds"}
		created, err := dyn.Resource(gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(spec, created.Object["spec"]); diff != "" {
			t.Errorf("stored spec (-written +stored: nothing pruned, nothing defaulted):\n%s", diff)
		}
	})
	t.Run("installing it again upgrades it in place", func(t *testing.T) {
		def.ShortNames = []string{"th", "thg"}
		c2, err := def.Build()
		if err != nil {
			t.Fatal(err)
		}
		if err := crd.Install(ctx, ext, c2); err != nil {
			t.Fatal(err)
		}
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, c2.Name, metav1.GetOptions{})
		if err != nil || len(got.Spec.Names.ShortNames) != 2 {
			t.Errorf("the upgraded CRD: %v, %v; want two short names", got.Spec.Names.ShortNames, err)
		}
	})
	t.Run("a kind another CRD of the group holds is ErrNamesNotAccepted", func(t *testing.T) {
		clash := &crd.Definition{Group: "scale.example.com", Kind: "Thing", Plural: "otherthings", Versions: []crd.Version{crd.VersionOf[*thing]("v1", crd.Storage())}}
		c3, err := clash.Build()
		if err != nil {
			t.Fatal(err)
		}
		if err := crd.Install(ctx, ext, c3); !errors.Is(err, crd.ErrNamesNotAccepted) {
			t.Errorf("Install: %v; want ErrNamesNotAccepted", err)
		}
	})
}

// allKinds has a field of each Go type kind and known type the package has
// a schema for.
type allKinds struct {
	S      string               `json:"s"`
	B      bool                 `json:"b"`
	I32    int32                `json:"i32"`
	I64    int64                `json:"i64"`
	F      float64              `json:"f"`
	Bytes  []byte               `json:"bytes"`
	List   []string             `json:"list"`
	Arr    [2]int32             `json:"arr"`
	M      map[string]int64     `json:"m"`
	Time   metav1.Time          `json:"time"`
	Micro  metav1.MicroTime     `json:"micro"`
	Dur    metav1.Duration      `json:"dur"`
	Qty    resource.Quantity    `json:"qty"`
	QtyInt resource.Quantity    `json:"qtyInt"`
	IOS    intstr.IntOrString   `json:"ios"`
	IOSInt intstr.IntOrString   `json:"iosInt"`
	Raw    runtime.RawExtension `json:"raw"`
	JSON   apiextensionsv1.JSON `json:"json"`
	RawMsg json.RawMessage      `json:"rawMsg"`
	Meta   metav1.ObjectMeta    `json:"meta"`
	Ptr    *string              `json:"ptr,omitempty"`
	Inner  struct {
		X string `json:"x"`
	} `json:"inner"`
}

func decode(raw []byte, scale *autoscalingv1.Scale) error {
	_, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, scale)
	return err
}

func runtimeEncode(scale *autoscalingv1.Scale) ([]byte, error) {
	scale.APIVersion, scale.Kind = "autoscaling/v1", "Scale"
	return json.Marshal(scale)
}
