package client_test

import (
	"encoding/json"
	"fmt"
	"math"
	goreflect "reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	"github.com/typedinformer/typedinformer/typed/client"
)

// decodedPod is a Pod as a decoder makes it: every string a copy of its own.
func decodedPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "12345",
			Labels:          map[string]string{"app": "web", "tier": "frontend"},
			Annotations:     map[string]string{"note": "shared"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs-uid", Controller: ptr.To(true)}},
			Finalizers:      []string{"example.com/cleanup"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example.com/web:v1", ImagePullPolicy: corev1.PullIfNotPresent,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
			NodeSelector: map[string]string{"zone": "a"}},
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// Two decoded Pods share their repeated strings once interned, and keep their own
// identity; nothing else changes.
func TestInternStringsSharesWhatObjectsRepeat(t *testing.T) {
	a, b := decodedPod(t, "a"), decodedPod(t, "b")
	want := a.DeepCopy()
	if same(a.Labels["app"], b.Labels["app"]) {
		t.Fatal("decoded Pods already share a label value: the test proves nothing")
	}
	for _, p := range []*corev1.Pod{a, b} {
		if _, err := client.InternStrings(p); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("interning changed the Pod (-want +got):\n%s", diff)
	}
	key := func(m map[string]string, k string) string {
		for kk := range m {
			if kk == k {
				return kk
			}
		}
		return ""
	}
	for what, pair := range map[string][2]string{
		"apiVersion":          {a.APIVersion, b.APIVersion},
		"kind":                {a.Kind, b.Kind},
		"namespace":           {a.Namespace, b.Namespace},
		"label key":           {key(a.Labels, "app"), key(b.Labels, "app")},
		"label value":         {a.Labels["app"], b.Labels["app"]},
		"annotation value":    {a.Annotations["note"], b.Annotations["note"]},
		"owner kind":          {a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind},
		"owner uid":           {string(a.OwnerReferences[0].UID), string(b.OwnerReferences[0].UID)},
		"finalizer":           {a.Finalizers[0], b.Finalizers[0]},
		"image":               {a.Spec.Containers[0].Image, b.Spec.Containers[0].Image},
		"pull policy":         {string(a.Spec.Containers[0].ImagePullPolicy), string(b.Spec.Containers[0].ImagePullPolicy)},
		"node selector key":   {key(a.Spec.NodeSelector, "zone"), key(b.Spec.NodeSelector, "zone")},
		"node selector value": {a.Spec.NodeSelector["zone"], b.Spec.NodeSelector["zone"]},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("%s %q is not shared", what, pair[0])
		}
	}
	if same(a.ResourceVersion, b.ResourceVersion) {
		t.Error("the resource version, unique to an object, was interned")
	}
}

// Nothing to intern, or nothing at all, is no error and no panic.
func TestInternStringsOfEmptyObjects(t *testing.T) {
	if _, err := client.InternStrings(&corev1.Pod{}); err != nil {
		t.Error(err)
	}
	if _, err := client.InternStrings(&Widget{}); err != nil {
		t.Error(err)
	}
}

// BenchmarkInternStrings is the CPU a Manager's cache spends interning one decoded Pod,
// freshly decoded as a watch event's object is, its strings its own: the Pods are decoded
// 256 at a time outside the timed part.
func BenchmarkInternStrings(b *testing.B) {
	data, err := json.Marshal(decodedPod(&testing.T{}, "p"))
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]*corev1.Pod, 256)
	b.ReportAllocs()
	b.StopTimer()
	for n := 0; n < b.N; {
		for i := range pods {
			pods[i] = &corev1.Pod{}
			if err := json.Unmarshal(data, pods[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		for i := 0; i < len(pods) && n < b.N; i, n = i+1, n+1 {
			_, _ = client.InternStrings(pods[i])
		}
		b.StopTimer()
	}
}

// A string interned before a garbage collection is shared with its copies interned after
// it, though nothing holds it but the objects: the first object is cached, the collection
// runs, and the next object decoded gets the first one's copy.
func TestInternStringsSharesAcrossCollections(t *testing.T) {
	a := decodedPod(t, "a")
	if _, err := client.InternStrings(a); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.GC()
	b := decodedPod(t, "b")
	if _, err := client.InternStrings(b); err != nil {
		t.Fatal(err)
	}
	if unshared := unsharedStrings("Pod", goreflect.ValueOf(a).Elem(), goreflect.ValueOf(b).Elem()); len(unshared) > 0 {
		t.Errorf("not shared after a collection: %v", unshared)
	}
}

// object is what a cache holds, as an interface: InternStrings of any kind.
type object interface {
	metav1.Object
	k8sruntime.Object
}

// tree is a recursive type: its walker reaches itself.
type tree struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Label    string
	Children []tree
	Next     *tree
	ByName   map[string]tree
}

func (t *tree) DeepCopyObject() k8sruntime.Object { panic("not used") }

// Every kind client-go knows, the CustomResourceDefinition (whose schema is recursive,
// with maps of structs) and a recursive type of a user's are filled at random; two copies
// whose strings are each their own are interned. Each copy keeps its value, and every
// string InternStrings promises to share (all reachable through exported fields, but
// an object's identity, the empty string and those over MaxInternedLen) is shared.
func TestInternStringsSharesEveryRepeatedStringOfEveryKind(t *testing.T) {
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	types := []goreflect.Type{goreflect.TypeFor[tree]()}
	for _, typ := range scheme.AllKnownTypes() {
		if goreflect.PointerTo(typ).Implements(goreflect.TypeFor[object]()) { // not lists, options
			types = append(types, typ)
		}
	}
	// No collection while it runs: what a collection does to shared strings is
	// TestInternStringsSharesAcrossCollections's.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	f := randfill.NewWithSeed(1).NilChance(0.2).NumElements(1, 3).MaxDepth(8).Funcs(
		// An embedded object is kept as raw bytes: nothing to intern, nothing to fill.
		func(r *k8sruntime.RawExtension, c randfill.Continue) { r.Raw = []byte(`{}`) },
	)
	for _, typ := range types {
		for i := range 3 {
			orig := goreflect.New(typ)
			f.Fill(orig.Interface())
			a, b := cloneStrings(orig.Elem()), cloneStrings(orig.Elem())
			for _, c := range []goreflect.Value{a, b} {
				if _, err := client.InternStrings(c.Addr().Interface().(object)); err != nil {
					t.Fatalf("%v: %v", typ, err)
				}
				if !apiequality.Semantic.DeepEqual(c.Interface(), orig.Elem().Interface()) {
					t.Fatalf("%v #%d: interning changed the object:\n%s", typ, i, cmp.Diff(orig.Elem().Interface(), c.Interface()))
				}
			}
			if unshared := unsharedStrings(typ.String(), a, b); len(unshared) > 0 {
				t.Errorf("%v #%d: not shared: %v", typ, i, unshared)
			}
		}
	}
}

// cloneStrings returns a copy of v in which every string reached through exported fields
// has data of its own, as a decoder makes it.
func cloneStrings(v goreflect.Value) goreflect.Value {
	out := goreflect.New(v.Type()).Elem()
	switch v.Kind() {
	case goreflect.String:
		out.SetString(strings.Clone(v.String()))
	case goreflect.Pointer:
		if !v.IsNil() {
			out.Set(cloneStrings(v.Elem()).Addr())
		}
	case goreflect.Slice:
		if !v.IsNil() {
			out.Set(goreflect.MakeSlice(v.Type(), v.Len(), v.Len()))
			for i := range v.Len() {
				out.Index(i).Set(cloneStrings(v.Index(i)))
			}
		}
	case goreflect.Map:
		if !v.IsNil() {
			out.Set(goreflect.MakeMap(v.Type()))
			for it := v.MapRange(); it.Next(); {
				out.SetMapIndex(cloneStrings(it.Key()), cloneStrings(it.Value()))
			}
		}
	case goreflect.Struct:
		out.Set(v) // unexported fields as they are
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out.Field(i).Set(cloneStrings(v.Field(i)))
			}
		}
	default:
		out.Set(v)
	}
	return out
}

// identity names the ObjectMeta fields unique to an object, which are not interned.
var identity = map[string]bool{"Name": true, "GenerateName": true, "UID": true, "ResourceVersion": true, "SelfLink": true}

// unsharedStrings returns the paths, under path, of the strings that a and b, equal
// values, should share and do not.
func unsharedStrings(path string, a, b goreflect.Value) []string {
	var out []string
	switch a.Kind() {
	case goreflect.String:
		if s := a.String(); s != "" && len(s) <= client.MaxInternedLen && !same(s, b.String()) {
			out = append(out, path)
		}
	case goreflect.Pointer:
		if !a.IsNil() {
			out = unsharedStrings(path, a.Elem(), b.Elem())
		}
	case goreflect.Slice:
		if a.Type().Elem().Kind() != goreflect.Uint8 {
			for i := range a.Len() {
				out = append(out, unsharedStrings(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i))...)
			}
		}
	case goreflect.Map:
		for it := a.MapRange(); it.Next(); {
			for bt := b.MapRange(); bt.Next(); {
				if bt.Key().Equal(it.Key()) {
					p := fmt.Sprintf("%s[%v]", path, it.Key())
					out = append(out, unsharedStrings(p+" (key)", it.Key(), bt.Key())...)
					out = append(out, unsharedStrings(p, it.Value(), bt.Value())...)
				}
			}
		}
	case goreflect.Struct:
		if a.Type() == goreflect.TypeFor[resource.Quantity]() {
			break // its strings are unexported
		}
		meta := a.Type() == goreflect.TypeFor[metav1.ObjectMeta]()
		for i := range a.NumField() {
			if f := a.Type().Field(i); f.IsExported() && !(meta && identity[f.Name]) {
				out = append(out, unsharedStrings(path+"."+f.Name, a.Field(i), b.Field(i))...)
			}
		}
	}
	return out
}

// floatKeyed has a map whose keys are not strings, one of them not equal to itself.
type floatKeyed struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	ByWeight map[float64]string
}

func (f *floatKeyed) DeepCopyObject() k8sruntime.Object { panic("not used") }

// A map keyed by anything but strings is left as it is: storing an entry back under a
// NaN key would add one, not replace it.
func TestInternStringsLeavesMapsWithOtherKeys(t *testing.T) {
	obj := &floatKeyed{ByWeight: map[float64]string{math.NaN(): "heavy", 1: "light"}}
	if _, err := client.InternStrings(obj); err != nil {
		t.Fatal(err)
	}
	if len(obj.ByWeight) != 2 {
		t.Errorf("the map has %d entries after interning, want 2: %v", len(obj.ByWeight), obj.ByWeight)
	}
}

// concurrent is a type no other test interns, so that its walker is planned while the
// goroutines of TestInternStringsConcurrently race to intern it.
type concurrent struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Tags []string
	Refs map[string][]string
}

func (c *concurrent) DeepCopyObject() k8sruntime.Object { panic("not used") }

// Caches intern on their own goroutines: the first objects of a type, interned at once,
// plan its walker once and are all interned (run with -race).
func TestInternStringsConcurrently(t *testing.T) {
	const goroutines = 8
	objs := make([]*concurrent, goroutines)
	for i := range objs {
		objs[i] = &concurrent{Tags: []string{strings.Clone("blue")}, Refs: map[string][]string{strings.Clone("k"): {strings.Clone("v")}}}
	}
	var wg sync.WaitGroup
	for _, o := range objs {
		wg.Go(func() { _, _ = client.InternStrings(o) })
	}
	wg.Wait()
	for _, o := range objs[1:] {
		if unshared := unsharedStrings("concurrent", goreflect.ValueOf(objs[0]).Elem(), goreflect.ValueOf(o).Elem()); len(unshared) > 0 {
			t.Errorf("not shared: %v", unshared)
		}
	}
}
