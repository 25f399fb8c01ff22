package typed_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

func TestOwnerKeysMapsOwnerReferencesOfTheKind(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web"},
		{APIVersion: "v1", Kind: "ConfigMap", Name: "not-a-replicaset"},
		{APIVersion: "example.com/v1", Kind: "ReplicaSet", Name: "other-group"},
	}}}
	got := typed.OwnerKeys[*corev1.Pod](schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, meta.RESTScopeNamespace)(pod)
	if diff := cmp.Diff([]string{"ns/web"}, got); diff != "" {
		t.Errorf("owner keys (-want +got):\n%s", diff)
	}
}

func TestRelatedEventsReconcileTheirOwners(t *testing.T) {
	owned := func(name, owner string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: owner},
		}}}
	}
	primaries := fake.New[obj, list](cm("a", "1"))
	secondaries := fake.New[*corev1.Secret, *corev1.SecretList](owned("a-copy", "a"))
	pc := testctl.New(t, primaries, controller.Options[obj]{})
	sc := testctl.New(t, secondaries, controller.Options[*corev1.Secret]{})
	got := newCalls()
	l, err := typed.NewLoop(pc, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		_, hasCopy := sc.Store().Get("ns/a-copy")
		got.add(fmt.Sprintf("%s copy=%v", req.Key, hasCopy))
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	typed.Related(l, sc, typed.OwnerKeys[*corev1.Secret](schema.GroupKind{Kind: "ConfigMap"}, meta.RESTScopeNamespace))

	ctx := runUntilEnd(context.Background(), t, pc.Run, sc.Run, l.Run)
	if first := got.wait(t, 1); first[0] != "ns/a copy=true" {
		t.Fatalf("initial reconcile = %q, want ns/a with its copy", first[0])
	}
	_ = secondaries.WaitForWatchers(ctx, 1)
	if _, err := secondaries.Delete("ns", "a-copy"); err != nil {
		t.Fatal(err)
	}
	// The deletion of the Secret reconciles its owner, which then sees the copy gone.
	for n := 2; ; n++ {
		if all := got.wait(t, n); all[n-1] == "ns/a copy=false" {
			break
		}
	}
}
