package main

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/typed/testenv"
)

// TestMirrorOnARealControlPlane runs the one-page controller against kube-apiserver and
// checks that the Secrets follow the labelled ConfigMaps: created, updated, restored
// after someone deletes a copy, and removed when the label or the ConfigMap goes.
func TestMirrorOnARealControlPlane(t *testing.T) {
	cp := testenv.Start(t, testenv.Options{})
	cs := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Mirror(ctx, cs, "default") }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Mirror: %v", err)
		}
	}()

	cms := cs.CoreV1().ConfigMaps("default")
	mk := func(name string, labels map[string]string, data map[string]string) {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mirrored := map[string]string{"mirror": "true"}
	mk("a", mirrored, map[string]string{"k": "1"})
	mk("b", mirrored, map[string]string{"k": "2"})
	mk("plain", nil, map[string]string{"k": "3"})

	secrets := func() map[string]string {
		list, err := cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, s := range list.Items {
			out[s.Name] = string(s.Data["k"])
		}
		return out
	}
	expect := func(step string, want map[string]string) {
		t.Helper()
		var got map[string]string
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			got = secrets()
			return cmp.Equal(want, got), nil
		})
		if err != nil {
			t.Fatalf("%s: secrets (-want +got):\n%s", step, cmp.Diff(want, got))
		}
	}
	expect("initial", map[string]string{"a": "1", "b": "2"})

	a, _ := cms.Get(ctx, "a", metav1.GetOptions{})
	a.Data["k"] = "10"
	if _, err := cms.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("update", map[string]string{"a": "10", "b": "2"})

	if err := cs.CoreV1().Secrets("default").Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("copy deleted by someone else", map[string]string{"a": "10", "b": "2"})

	b, _ := cms.Get(ctx, "b", metav1.GetOptions{})
	b.Labels = nil
	if _, err := cms.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("label removed and ConfigMap deleted", map[string]string{})
}
