package client_test

import (
	"encoding/json"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

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

// BenchmarkInternStrings is the CPU a Manager's cache spends interning one decoded Pod.
func BenchmarkInternStrings(b *testing.B) {
	t := &testing.T{}
	pods := make([]*corev1.Pod, b.N)
	for i := range pods {
		pods[i] = decodedPod(t, "p")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		_, _ = client.InternStrings(pods[i])
	}
}
