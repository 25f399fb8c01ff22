package event_test

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/fuzzseed"
)

func TestObjectKey(t *testing.T) {
	tests := []struct {
		name    string
		obj     *corev1.ConfigMap
		want    string
		wantErr error
	}{
		{name: "namespaced object", obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}, want: "ns/a"},
		{name: "cluster-scoped object", obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, want: "a"},
		{name: "nil object", obj: nil, wantErr: event.ErrNilObject},
		{name: "object with no name", obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}}, wantErr: event.ErrNoName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := event.ObjectKey(tt.obj)
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("ObjectKey() = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// FuzzObjectKey checks that any namespace and name give a key or a clear error, never a
// panic, and that SplitKey inverts ObjectKey for names without a slash.
func FuzzObjectKey(f *testing.F) {
	fuzzseed.Add(f, "FuzzObjectKey")
	f.Fuzz(func(t *testing.T, ns, name string) {
		key, err := event.ObjectKey(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		if name == "" {
			if !errors.Is(err, event.ErrNoName) {
				t.Fatalf("no name: err = %v, want ErrNoName", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("ObjectKey(%q, %q): %v", ns, name, err)
		}
		gotNS, gotName := event.SplitKey(key)
		for _, r := range ns + name {
			if r == '/' {
				return // names and namespaces never contain a slash on a real server
			}
		}
		if gotNS != ns || gotName != name {
			t.Fatalf("SplitKey(%q) = %q, %q; want %q, %q", key, gotNS, gotName, ns, name)
		}
	})
}
