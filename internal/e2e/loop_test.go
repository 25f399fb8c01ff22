package e2e

// typed.Loop: draining when its context ends, and reconciles triggered by related
// objects (typed.Related with typed.OwnerKeys).

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

// TestLoopStartsNoReconcileAfterItsContextEnds checks Loop.Run's promise that when
// ctx ends it "stops taking new keys, lets in-flight reconciles finish": keys still
// waiting in the queue must not be reconciled (with a cancelled context) after ctx ends.
func TestLoopStartsNoReconcileAfterItsContextEnds(t *testing.T) {
	const ns = "drain"
	_, admin := setUp(t, ns)
	cs := admin.kube
	for i := range 5 {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	configMaps := testctl.New(t, cs.CoreV1().ConfigMaps(ns), controller.Options[*corev1.ConfigMap]{})
	start(t, runAll{configMaps.Run})
	var (
		mu          sync.Mutex
		first       = true
		inFlight    = make(chan struct{})
		afterCancel []string
	)
	loop, err := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			mu.Lock()
			isFirst := first
			first = false
			if !isFirst && ctx.Err() != nil {
				afterCancel = append(afterCancel, req.Key)
			}
			mu.Unlock()
			if isFirst {
				close(inFlight)
				<-ctx.Done() // in flight when the loop is stopped
			}
			return typed.Result{}, ctx.Err()
		}), typed.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	receive(t, inFlight, "the first key's reconcile starts") // one key in flight, four waiting
	cancel()
	if err := receive(t, done, "Loop.Run returns once its context ends"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(afterCancel) > 0 {
		t.Errorf("after its context ended, the loop started reconciling %d more keys, with a cancelled context: %v",
			len(afterCancel), afterCancel)
	}
}

// TestRelatedPodsReconcileTheirReplicaSet reconciles ReplicaSets, with the Pods they
// own (by owner reference; there is no controller manager, so the test creates them)
// mapped to them by typed.OwnerKeys. Changing, deleting or re-owning a Pod reconciles
// the ReplicaSets concerned, which then see the Pods' new state.
func TestRelatedPodsReconcileTheirReplicaSet(t *testing.T) {
	const ns = "related"
	_, admin := setUp(t, ns)
	cs := admin.kube
	ctx := context.Background()
	replicaSets, pods := cs.AppsV1().ReplicaSets(ns), cs.CoreV1().Pods(ns)
	owners := map[string]*appsv1.ReplicaSet{}
	for _, name := range []string{"web", "api"} {
		lbls := map[string]string{"app": name}
		rs, err := replicaSets.Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbls}, Spec: podSpec()},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		owners[name] = rs
	}
	ownedBy := func(rs string) []metav1.OwnerReference {
		return []metav1.OwnerReference{*metav1.NewControllerRef(owners[rs], appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}
	}
	for _, p := range []struct{ name, owner string }{{"web-1", "web"}, {"web-2", "web"}, {"api-1", "api"}, {"orphan", ""}} {
		pod := newPod(p.name, map[string]string{"rev": "1"})
		if p.owner != "" {
			pod.OwnerReferences = ownedBy(p.owner)
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	rsCtl := testctl.New(t, replicaSets, controller.Options[*appsv1.ReplicaSet]{})
	podCtl := testctl.New(t, pods, controller.Options[*corev1.Pod]{})
	keysOf := typed.OwnerKeys[*corev1.Pod](schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, meta.RESTScopeNamespace)
	var (
		mu   sync.Mutex
		seen []string // "key: pods it saw"
	)
	loop, err := typed.NewLoop(rsCtl, typed.ReconcilerFunc[*appsv1.ReplicaSet](
		func(_ context.Context, req typed.Request[*appsv1.ReplicaSet]) (typed.Result, error) {
			var owned []string
			for _, p := range podCtl.Store().InNamespace(req.Namespace) {
				if slices.Contains(keysOf(p), req.Key) {
					owned = append(owned, p.Name+"@rev"+p.Labels["rev"])
				}
			}
			sort.Strings(owned)
			mu.Lock()
			seen = append(seen, req.Key+": "+strings.Join(owned, ","))
			mu.Unlock()
			return typed.Result{}, nil
		}), typed.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	typed.Related(loop, podCtl, keysOf)
	start(t, runAll{rsCtl.Run, podCtl.Run, loop.Run})

	// expect waits for a reconcile, after the mark, in which each key saw exactly the pods
	// given.
	mark := 0
	expect := func(step string, want ...string) {
		t.Helper()
		waitUntil(t, step, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			for _, w := range want {
				if !slices.Contains(seen[mark:], w) {
					return false, fmt.Sprintf("no reconcile %q among %q", w, seen[mark:])
				}
			}
			return true, ""
		})
		mu.Lock()
		mark = len(seen)
		mu.Unlock()
	}
	expect("initial reconcile of every ReplicaSet with its pods",
		ns+"/web: web-1@rev1,web-2@rev1", ns+"/api: api-1@rev1")

	if _, err := pods.Patch(ctx, "web-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"rev":"2"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("updating a pod reconciles its ReplicaSet", ns+"/web: web-1@rev2,web-2@rev1")

	if err := pods.Delete(ctx, "web-2", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	expect("deleting a pod reconciles its ReplicaSet", ns+"/web: web-1@rev2")

	// Moving a pod to another owner reconciles both: the new one from the pod's new state,
	// the old one from its prior state.
	patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web","uid":%q,"controller":true,"blockOwnerDeletion":true}]}}`,
		owners["web"].UID)
	if _, err := pods.Patch(ctx, "api-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("re-owning a pod reconciles its old and new ReplicaSets", ns+"/web: api-1@rev1,web-1@rev2", ns+"/api: ")

	// A pod with no owner reconciles nothing.
	if _, err := pods.Patch(ctx, "orphan", types.MergePatchType, []byte(`{"metadata":{"labels":{"rev":"2"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Patch(ctx, "web-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"rev":"3"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// web-1's change comes after the orphan's on the same watch, so once it is reconciled
	// the orphan's event has been handled too.
	expect("a later change", ns+"/web: api-1@rev1,web-1@rev3")
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen[mark:] {
		if strings.HasPrefix(s, ns+"/api") {
			t.Errorf("changing an orphan pod or a web pod reconciled api: %q", s)
		}
	}
}
