package webhook_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedinformer/typedinformer/typed/webhook"
)

// A custom resource in three versions: v1 is the hub; v2 nests the message in a page and
// keeps it as two fields; v3 keeps replicas as a string and refuses or panics on some
// values, to attack the Converter.
type thingV1 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Message  string `json:"message"`
		Replicas int32  `json:"replicas"`
	} `json:"spec"`
}

type thingV2 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Page struct {
			Title string `json:"title"`
			Body  string `json:"body,omitempty"`
		} `json:"page"`
		Replicas int32 `json:"replicas"`
	} `json:"spec"`
}

type thingV3 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Replicas          string `json:"replicas"`
}

func (t *thingV1) DeepCopyObject() runtime.Object {
	c := *t
	t.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}
func (t *thingV2) DeepCopyObject() runtime.Object {
	c := *t
	t.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}
func (t *thingV3) DeepCopyObject() runtime.Object {
	c := *t
	t.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// v2 splits the message at its first line: the title, and the rest.
func (t *thingV2) ConvertTo(hub *thingV1) error {
	hub.Spec.Message, hub.Spec.Replicas = t.Spec.Page.Title, t.Spec.Replicas
	if t.Spec.Page.Body != "" {
		hub.Spec.Message += "\n" + t.Spec.Page.Body
	}
	return nil
}

func (t *thingV2) ConvertFrom(hub *thingV1) error {
	t.Spec.Page.Title, t.Spec.Page.Body, _ = strings.Cut(hub.Spec.Message, "\n")
	t.Spec.Replicas = hub.Spec.Replicas
	// A conversion may keep what its version lacks in an annotation: merged, not lost.
	t.Annotations = map[string]string{"converted-by": "v2"}
	return nil
}

func (t *thingV3) ConvertTo(hub *thingV1) error {
	_, err := fmt.Sscan(t.Replicas, &hub.Spec.Replicas)
	return err
}

func (t *thingV3) ConvertFrom(hub *thingV1) error {
	if hub.Spec.Replicas < 0 {
		panic("negative replicas")
	}
	if hub.Spec.Replicas > 100 {
		return errors.New("more than 100 replicas cannot be written in v3")
	}
	t.Replicas = fmt.Sprint(hub.Spec.Replicas)
	return nil
}

var thingKind = schema.GroupVersionKind{Group: "things.example.com", Version: "v1", Kind: "Thing"}

func converter(t *testing.T) *webhook.Converter[*thingV1] {
	t.Helper()
	c, err := webhook.NewConverter[*thingV1](thingKind)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(webhook.AddSpoke[*thingV2](c, "v2"), webhook.AddSpoke[*thingV3](c, "v3")); err != nil {
		t.Fatal(err)
	}
	return c
}

// convert posts a ConversionReview of objs to h and returns the response.
func convert(t *testing.T, h http.Handler, desired string, objs ...any) *apiextensionsv1.ConversionResponse {
	t.Helper()
	req := &apiextensionsv1.ConversionRequest{UID: "uid-c", DesiredAPIVersion: desired}
	for _, o := range objs {
		req.Objects = append(req.Objects, raw(t, o))
	}
	body, _ := json.Marshal(&apiextensionsv1.ConversionReview{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"}, Request: req})
	code, out := post(h, "application/json", body)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, out)
	}
	var got apiextensionsv1.ConversionReview
	if err := json.Unmarshal(out, &got); err != nil || got.Response == nil || got.Response.UID != "uid-c" {
		t.Fatalf("answer %s (%v); want a ConversionReview with the request's UID", out, err)
	}
	return got.Response
}

func v1Thing(name, message string, replicas int32) map[string]any {
	return map[string]any{"apiVersion": "things.example.com/v1", "kind": "Thing",
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": "u-" + name, "resourceVersion": "7", "generation": 3,
			"labels": map[string]any{"app": name}, "annotations": map[string]any{"note": "kept"},
			"managedFields": []any{map[string]any{"manager": "kubectl", "operation": "Update"}}, "futureMetadata": "kept too"},
		"spec": map[string]any{"message": message, "replicas": replicas}}
}

func decoded(t *testing.T, r runtime.RawExtension) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConversionRoundTripThroughTheHubLosesNothing(t *testing.T) {
	c := converter(t)
	objs := []any{v1Thing("a", "Hello\nworld\nagain", 2), v1Thing("b", "Title only", 0), v1Thing("c", "", 7)}
	to2 := convert(t, c, "things.example.com/v2", objs...)
	if to2.Result.Status != metav1.StatusSuccess || len(to2.ConvertedObjects) != len(objs) {
		t.Fatalf("to v2: %+v; want success with %d objects", to2.Result, len(objs))
	}
	first := decoded(t, to2.ConvertedObjects[0])
	wantMeta := decoded(t, raw(t, v1Thing("a", "", 0)))["metadata"].(map[string]any)
	wantMeta["annotations"] = map[string]any{"note": "kept", "converted-by": "v2"}
	if first["apiVersion"] != "things.example.com/v2" || first["kind"] != "Thing" {
		t.Errorf("converted object is a %v %v; want things.example.com/v2 Thing", first["apiVersion"], first["kind"])
	}
	if diff := cmp.Diff(wantMeta, first["metadata"]); diff != "" {
		t.Errorf("metadata: the request's, with the conversion's annotation merged in (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"page": map[string]any{"title": "Hello", "body": "world\nagain"}, "replicas": float64(2)}, first["spec"]); diff != "" {
		t.Errorf("v2 spec (-want +got):\n%s", diff)
	}
	// v2 → hub → v3 → hub → v1: every step through the hub.
	var back []any
	for _, o := range to2.ConvertedObjects {
		back = append(back, decoded(t, o))
	}
	to3 := convert(t, c, "things.example.com/v3", back...)
	if to3.Result.Status != metav1.StatusSuccess {
		t.Fatalf("to v3: %+v", to3.Result)
	}
	back = nil
	for _, o := range to2.ConvertedObjects { // v3 keeps no message: go back from v2
		back = append(back, decoded(t, o))
	}
	to1 := convert(t, c, "things.example.com/v1", back...)
	if to1.Result.Status != metav1.StatusSuccess {
		t.Fatalf("back to v1: %+v", to1.Result)
	}
	for i, o := range to1.ConvertedObjects {
		want := decoded(t, raw(t, objs[i]))
		want["metadata"].(map[string]any)["annotations"] = map[string]any{"note": "kept", "converted-by": "v2"}
		if diff := cmp.Diff(want, decoded(t, o)); diff != "" {
			t.Errorf("object %d after v1 → v2 → v1 (-want +got):\n%s", i, diff)
		}
	}
	if got := decoded(t, to3.ConvertedObjects[0]); got["replicas"] != "2" || got["apiVersion"] != "things.example.com/v3" {
		t.Errorf("v3: %v; want replicas \"2\" at things.example.com/v3", got)
	}
}

func TestAConversionThatFailsFailsTheReviewNamingTheObject(t *testing.T) {
	c := converter(t)
	for name, tc := range map[string]struct {
		desired string
		objs    []any
		want    string
	}{
		"an error":            {"things.example.com/v3", []any{v1Thing("ok", "m", 1), v1Thing("big", "m", 101)}, "object 2 of 2 (things.example.com/v1 Thing ns/big): from the hub version v1 to v3: more than 100 replicas"},
		"a panic":             {"things.example.com/v3", []any{v1Thing("neg", "m", -1)}, "object 1 of 1 (things.example.com/v1 Thing ns/neg): the conversion panicked: negative replicas"},
		"a version not known": {"things.example.com/v9", []any{v1Thing("a", "m", 1)}, `the desired version v9 of Thing.things.example.com is not converted by this webhook (it converts ["v1" "v2" "v3"])`},
		"another group":       {"other.example.com/v2", []any{v1Thing("a", "m", 1)}, `the desired API version "other.example.com/v2" is not of group things.example.com`},
		"an object of another kind": {"things.example.com/v2", []any{map[string]any{"apiVersion": "things.example.com/v1", "kind": "Other", "metadata": map[string]any{"name": "o"}}},
			`an object of apiVersion "things.example.com/v1" and kind "Other", not of Thing.things.example.com`},
		"an object of an unknown version": {"things.example.com/v2", []any{map[string]any{"apiVersion": "things.example.com/v0", "kind": "Thing", "metadata": map[string]any{"name": "o"}}},
			`version v0 is not converted by this webhook`},
		"an object that does not decode": {"things.example.com/v2", []any{map[string]any{"apiVersion": "things.example.com/v1", "kind": "Thing", "spec": map[string]any{"replicas": "two"}}},
			`to the hub version v1: decoding into a *webhook_test.thingV1`},
	} {
		resp := convert(t, c, tc.desired, tc.objs...)
		if resp.Result.Status != metav1.StatusFailure || resp.ConvertedObjects != nil || !strings.Contains(resp.Result.Message, tc.want) ||
			!strings.Contains(resp.Result.Message, webhook.ErrConversion.Error()) {
			t.Errorf("%s: %+v with %d objects; want Failure, no objects, saying %q", name, resp.Result, len(resp.ConvertedObjects), tc.want)
		}
	}
}

func TestConverterRefusesWhatCannotWork(t *testing.T) {
	if _, err := webhook.NewConverter[*thingV1](schema.GroupVersionKind{Version: "v1", Kind: "Thing"}); !errors.Is(err, webhook.ErrNoKind) {
		t.Errorf("a kind without a group: %v; want ErrNoKind", err)
	}
	c := converter(t)
	if err := webhook.AddSpoke[*thingV2](c, "v2"); !errors.Is(err, webhook.ErrInvalidOptions) {
		t.Errorf("v2 twice: %v; want ErrInvalidOptions", err)
	}
	if err := webhook.AddSpoke[*thingV2](c, "v1"); !errors.Is(err, webhook.ErrInvalidOptions) {
		t.Errorf("a spoke at the hub's version: %v; want ErrInvalidOptions", err)
	}
	if err := webhook.AddSpoke[*thingV2, *thingV1](nil, "v4"); !errors.Is(err, webhook.ErrInvalidOptions) {
		t.Errorf("a nil Converter: %v; want ErrInvalidOptions", err)
	}
	if got := c.Path(); got != "/convert-things-example-com-thing" {
		t.Errorf("Path = %q", got)
	}
	if code, body := post(c, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`)); code != http.StatusBadRequest {
		t.Errorf("an AdmissionReview: %d %s; want 400", code, body)
	}
}

// Reviews served concurrently while a version is added see either converter state,
// never a torn one (-race).
func TestConversionsRaceWithAddSpoke(t *testing.T) {
	c, err := webhook.NewConverter[*thingV1](thingKind)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				resp := convert(t, c, "things.example.com/v1", v1Thing("a", "m", 1))
				if resp.Result.Status != metav1.StatusSuccess {
					t.Errorf("v1 to v1: %+v", resp.Result)
				}
			}
		})
	}
	if err := webhook.AddSpoke[*thingV2](c, "v2"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if resp := convert(t, c, "things.example.com/v2", v1Thing("a", "m", 1)); resp.Result.Status != metav1.StatusSuccess {
		t.Errorf("to the version added: %+v", resp.Result)
	}
}
