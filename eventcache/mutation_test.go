package eventcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// benchConfigMap is a ConfigMap of a realistic size: labels, annotations, an owner and
// a few data entries (about 1 KiB of JSON).
func benchConfigMap(i int, rv string) obj {
	o := cm(fmt.Sprintf("cm-%06d", i), rv)
	o.UID = "6f1c9a3e-0a5b-4c1e-9d5e-2b7f4c3a1d00"
	o.Labels = map[string]string{"app": "web", "tier": "frontend", "release": "stable"}
	o.Annotations = map[string]string{"deployment.kubernetes.io/revision": "3", "owner": "team-a"}
	o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "0a0b0c0d"}}
	o.Data = map[string]string{}
	for k := range 6 {
		o.Data[fmt.Sprintf("key-%d", k)] = strings.Repeat("v", 100)
	}
	return o
}

// BenchmarkSetWithMutationDetector measures a store write with the detector on: an
// update of one of 10,000 stored objects (the replaced state is checked, the new one
// kept).
func BenchmarkSetWithMutationDetector(b *testing.B) {
	const n = 10000
	w := NewWriter[obj](nil)
	w.DetectMutations()
	objs := make([]obj, n)
	keys := make([]string, n)
	for i := range objs {
		objs[i] = benchConfigMap(i, "1")
		keys[i] = "ns/" + objs[i].Name
		if _, _, err := w.Set(keys[i], objs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := w.Set(keys[i%n], objs[i%n]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := w.CheckMutations(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCheckMutations measures the check Run makes when it ends, per stored object.
func BenchmarkCheckMutations(b *testing.B) {
	const n = 10000
	w := NewWriter[obj](nil)
	w.DetectMutations()
	for i := range n {
		o := benchConfigMap(i, "1")
		if _, _, err := w.Set("ns/"+o.Name, o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.CheckMutations(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/object")
}

// widget is a custom resource's Go struct written by hand, with the DeepCopyObject such
// structs often get: it copies the top level and shares everything below it.
type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              widgetSpec `json:"spec"`
}

type widgetSpec struct {
	Replicas *int32            `json:"replicas,omitempty"`
	Ports    []int32           `json:"ports,omitempty"`
	Settings map[string]string `json:"settings,omitempty"`
	Ratio    float64           `json:"ratio,omitempty"`
	Payload  payload           `json:"payload,omitempty"`
}

// payload's MarshalJSON fails on "fail" and panics on "panic".
type payload string

func (p payload) MarshalJSON() ([]byte, error) {
	switch p {
	case "fail":
		return nil, errors.New("payload refuses")
	case "panic":
		panic("payload panics")
	}
	return json.Marshal(string(p))
}

// DeepCopyObject is shallow: the copy shares Replicas, Ports and Settings.
func (w *widget) DeepCopyObject() runtime.Object {
	c := *w
	return &c
}

func newWidget(name string) *widget {
	replicas := int32(1)
	return &widget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "1"},
		Spec:       widgetSpec{Replicas: &replicas, Ports: []int32{80}, Settings: map[string]string{"mode": "fast"}},
	}
}

// found is what the tests compare of the errors the detector returns.
type found struct {
	Key      string
	Mutation bool   // a *MutationError, else another error
	NotJSON  bool   // the report of an object that does not encode
	Shows    string // a text the diff (or the error) contains
}

func foundIn(errs []error, shows ...string) []found {
	var out []found
	for _, err := range errs {
		f := found{NotJSON: errors.Is(err, errNotJSON)}
		text := err.Error()
		var m *MutationError
		if errors.As(err, &m) {
			f.Key, f.Mutation, text = m.Key, true, m.Diff
		}
		for _, s := range shows {
			if strings.Contains(text, s) {
				f.Shows = s
			}
		}
		out = append(out, f)
	}
	return out
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestTheDetectorSeesBelowAShallowDeepCopy: a change made in place below the top level
// of an object whose DeepCopyObject is shallow (a map value, what a pointer points to, a
// slice element) is found when the object is replaced, deleted, or checked, and the diff
// shows the change, by its JSON field names.
func TestTheDetectorSeesBelowAShallowDeepCopy(t *testing.T) {
	w := NewWriter[*widget](nil)
	w.DetectMutations()
	for _, name := range []string{"replaced", "deleted", "kept", "untouched"} {
		if _, _, err := w.Set("ns/"+name, newWidget(name)); err != nil {
			t.Fatal(err)
		}
	}
	get := func(key string) *widget { o, _ := w.Store().Get(key); return o }
	get("ns/replaced").Spec.Settings["mode"] = "slow"
	*get("ns/deleted").Spec.Replicas = 7
	get("ns/kept").Spec.Ports[0] = 8080
	if _, _, err := w.Set("ns/replaced", newWidget("replaced")); err != nil {
		t.Fatal(err)
	}
	w.Delete("ns/deleted")
	got := foundIn(append(w.takeMutations(), unjoin(w.CheckMutations())...), `"slow"`, "int64(7)", "int64(8080)")
	want := []found{
		{Key: "ns/replaced", Mutation: true, Shows: `"slow"`},
		{Key: "ns/deleted", Mutation: true, Shows: "int64(7)"},
		{Key: "ns/kept", Mutation: true, Shows: "int64(8080)"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mutations found (-want +got):\n%s", diff)
	}
	var m *MutationError
	if err := w.CheckMutations(); errors.As(err, &m) && !strings.Contains(m.Diff, `"ports"`) {
		t.Errorf("the diff does not name the changed field by its JSON name:\n%s", m.Diff)
	}
}

// TestTheDetectorComparesMeaningNotGoForm: unstructured objects are watched through
// their JSON too; a resource.Quantity whose cached string is filled in by a reader (its
// String method writes it) is not a change, as equality.Semantic has it, while a change
// of its value is.
func TestTheDetectorComparesMeaningNotGoForm(t *testing.T) {
	t.Run("unstructured", func(t *testing.T) {
		w := NewWriter[*unstructured.Unstructured](nil)
		w.DetectMutations()
		for _, name := range []string{"changed", "untouched"} {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "example.com/v1", "kind": "Widget",
				"metadata": map[string]any{"namespace": "ns", "name": name},
				"spec":     map[string]any{"replicas": int64(1), "ports": []any{int64(80)}},
			}}
			if _, _, err := w.Set("ns/"+name, u); err != nil {
				t.Fatal(err)
			}
		}
		u, _ := w.Store().Get("ns/changed")
		u.Object["spec"].(map[string]any)["ports"].([]any)[0] = int64(8080)
		got := foundIn(unjoin(w.CheckMutations()), "8080")
		if diff := cmp.Diff([]found{{Key: "ns/changed", Mutation: true, Shows: "8080"}}, got); diff != "" {
			t.Errorf("mutations found (-want +got):\n%s", diff)
		}
	})
	t.Run("quantity", func(t *testing.T) {
		w := NewWriter[*corev1.Pod](nil)
		w.DetectMutations()
		for _, name := range []string{"read", "changed"} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
			pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(1<<30, resource.BinarySI)},
			}}}
			if _, _, err := w.Set("ns/"+name, pod); err != nil {
				t.Fatal(err)
			}
		}
		pod, _ := w.Store().Get("ns/read")
		_ = pod.Spec.Volumes[0].EmptyDir.SizeLimit.String() // fills in the cached string
		pod, _ = w.Store().Get("ns/changed")
		pod.Spec.Volumes[0].EmptyDir.SizeLimit.Add(resource.MustParse("1Gi"))
		got := foundIn(unjoin(w.CheckMutations()), "2Gi")
		if diff := cmp.Diff([]found{{Key: "ns/changed", Mutation: true, Shows: "2Gi"}}, got); diff != "" {
			t.Errorf("mutations found (-want +got):\n%s", diff)
		}
	})
}

// TestTheDetectorReportsObjectsThatDoNotEncode: an object that does not encode as JSON
// (a MarshalJSON that fails or panics, a NaN) is reported once, not as a mutation, and
// watched through its DeepCopyObject instead, which still finds a change of the top
// level; nothing panics. An object that encoded when stored and no longer does was
// changed, and is reported as a mutation.
func TestTheDetectorReportsObjectsThatDoNotEncode(t *testing.T) {
	w := NewWriter[*widget](nil)
	w.DetectMutations()
	set := func(key string, o *widget) {
		t.Helper()
		if _, _, err := w.Set(key, o); err != nil {
			t.Fatal(err)
		}
	}
	fails, panics, nan, later := newWidget("fails"), newWidget("panics"), newWidget("nan"), newWidget("later")
	fails.Spec.Payload, panics.Spec.Payload, nan.Spec.Ratio = "fail", "panic", math.NaN()
	for _, o := range []*widget{fails, panics, nan, later} {
		set("ns/"+o.Name, o)
	}
	got := foundIn(w.takeMutations(), "payload refuses")
	if diff := cmp.Diff([]found{{NotJSON: true, Shows: "payload refuses"}}, got); diff != "" {
		t.Errorf("reports of the first writes (-want +got):\n%s", diff)
	}
	stored := func(key string) *widget { o, _ := w.Store().Get(key); return o }
	stored("ns/fails").Spec.Ratio = 2                        // top level: seen through the copy
	stored("ns/panics").Labels = map[string]string{"x": "y"} // ObjectMeta is copied too
	stored("ns/later").Spec.Payload = "fail"                 // no longer encodes
	set("ns/fails", newWidget("fails"))
	got = foundIn(append(w.takeMutations(), unjoin(w.CheckMutations())...), "Ratio", "Labels", "no longer encodes")
	want := []found{
		{Key: "ns/fails", Mutation: true, Shows: "Ratio"},
		{Key: "ns/later", Mutation: true, Shows: "no longer encodes"},
		{Key: "ns/panics", Mutation: true, Shows: "Labels"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mutations found (-want +got):\n%s", diff)
	}
}
