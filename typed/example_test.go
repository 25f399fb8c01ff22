package typed_test

import (
	"context"
	"fmt"

	"github.com/typedinformer/typedinformer/typed/predicate"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/typed"
)

// A level-driven reconciler: it is told which key to make right, gets the freshest cached
// object, and for a deletion the last state the cache knew.
func ExampleLoop() {
	src := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"},
			Data: map[string]string{"mode": "fast"}},
	)
	configMaps, err := controller.New(src, controller.Options[*corev1.ConfigMap]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	reconciled := make(chan string)
	loop, err := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(_ context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if req.Deleted {
				reconciled <- fmt.Sprintf("%s deleted, last known data %v", req.Key, req.LastKnown.Data)
			} else {
				reconciled <- fmt.Sprintf("%s has data %v", req.Key, req.Object.Data)
			}
			return typed.Result{}, nil
		}), typed.Options{Workers: 2})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- typed.RunAll(ctx, configMaps.Run, loop.Run) }()

	fmt.Println(<-reconciled) // every known key is reconciled once the loop starts
	_, _ = src.Delete("default", "settings")
	fmt.Println(<-reconciled)
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// default/settings has data map[mode:fast]
	// default/settings deleted, last known data map[mode:fast]
	// stopped: <nil>
}

// Predicates filter the events that reconcile a key. GenerationChanged ignores writes
// that keep metadata.generation, such as a controller's own status updates, so only the
// spec change below is reconciled; labels changes are let through too.
func ExamplePredicate() {
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 1}}
	src := fake.New[*appsv1.Deployment, *appsv1.DeploymentList](web)
	deployments, err := controller.New(src, controller.Options[*appsv1.Deployment]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	reconciled := make(chan string)
	loop, err := typed.NewLoop(deployments, typed.ReconcilerFunc[*appsv1.Deployment](
		func(_ context.Context, req typed.Request[*appsv1.Deployment]) (typed.Result, error) {
			reconciled <- fmt.Sprintf("%s: generation %d, %d ready", req.Key, req.Object.Generation, req.Object.Status.ReadyReplicas)
			return typed.Result{}, nil
		}), typed.Options{},
		predicate.Or[*appsv1.Deployment](predicate.GenerationChanged, predicate.LabelsChanged))
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- typed.RunAll(ctx, deployments.Run, loop.Run) }()
	fmt.Println(<-reconciled) // an addition always passes

	status := web.DeepCopy() // the API server keeps the generation for a status write
	status.Status.ReadyReplicas = 1
	_, _ = src.Update(status)
	spec := status.DeepCopy() // and increments it for a spec write
	spec.Generation, spec.Spec.Paused = 2, true
	_, _ = src.Update(spec)
	fmt.Println(<-reconciled)
	cancel()
	<-done
	// Output:
	// shop/web: generation 1, 0 ready
	// shop/web: generation 2, 1 ready
}

// OwnerKeys maps an object to its owners' keys, the usual mapping for Related: here a
// Pod to the ReplicaSet that owns it.
func ExampleOwnerKeys() {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-7d9f-abcde",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f"}}}}
	replicaSetsOf := typed.OwnerKeys[*corev1.Pod](schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, meta.RESTScopeNamespace)
	fmt.Println(replicaSetsOf(pod))
	// Output: [shop/web-7d9f]
}

// Related reconciles a ReplicaSet whenever one of its Pods changes.
func ExampleRelated() {
	replicaSets, err := controller.New(fake.New[*appsv1.ReplicaSet, *appsv1.ReplicaSetList](
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}), controller.Options[*appsv1.ReplicaSet]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	podSource := fake.New[*corev1.Pod, *corev1.PodList]()
	pods, err := controller.New(podSource, controller.Options[*corev1.Pod]{})
	if err != nil {
		fmt.Println(err)
		return
	}

	reconciled := make(chan string)
	loop, err := typed.NewLoop(replicaSets, typed.ReconcilerFunc[*appsv1.ReplicaSet](
		func(_ context.Context, req typed.Request[*appsv1.ReplicaSet]) (typed.Result, error) {
			owned := 0
			for _, p := range pods.Store().InNamespace(req.Namespace) {
				if len(p.OwnerReferences) > 0 && p.OwnerReferences[0].Name == req.Name {
					owned++
				}
			}
			reconciled <- fmt.Sprintf("%s owns %d pods", req.Key, owned)
			return typed.Result{}, nil
		}), typed.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	typed.Related(loop, pods, typed.OwnerKeys[*corev1.Pod](schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, meta.RESTScopeNamespace))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- typed.RunAll(ctx, replicaSets.Run, pods.Run, loop.Run) }()
	fmt.Println(<-reconciled)
	_, _ = podSource.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web"}}}})
	fmt.Println(<-reconciled)
	cancel()
	<-done
	// Output:
	// shop/web owns 0 pods
	// shop/web owns 1 pods
}
