package write_test

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/write"
)

// A reconciler that must clean up before its object goes: the first lines of the
// reconcile hand deletions to the Finalizer, which adds itself to live objects.
func ExampleFinalizer_Handle() {
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", ResourceVersion: "1"}}
	cs := kubefake.NewClientset(web)
	finalizer := write.NewFinalizer(cs.AppsV1().Deployments, "example.com/release-ip",
		func(ctx context.Context, d *appsv1.Deployment) error {
			fmt.Println("releasing the IP of", d.Name)
			return nil
		})
	reconcile := func(ctx context.Context, req typed.Request[*appsv1.Deployment]) (typed.Result, error) {
		if deleted, err := finalizer.Handle(ctx, req); deleted || err != nil {
			return typed.Result{}, err
		}
		fmt.Println("reconciling", req.Name)
		return typed.Result{}, nil
	}

	ctx := context.Background()
	_, _ = reconcile(ctx, typed.Request[*appsv1.Deployment]{Namespace: "shop", Name: "web", Object: web})
	web, _ = cs.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
	fmt.Println("finalizers:", web.Finalizers)

	web.DeletionTimestamp = &metav1.Time{Time: time.Now()} // as the API server marks a deletion
	_, _ = reconcile(ctx, typed.Request[*appsv1.Deployment]{Namespace: "shop", Name: "web", Object: web})
	web, _ = cs.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
	fmt.Println("finalizers:", web.Finalizers)
	// Output:
	// reconciling web
	// finalizers: [example.com/release-ip]
	// releasing the IP of web
	// finalizers: []
}

// A status write that changes nothing makes no API call.
func ExampleStatusWriter_Update() {
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", ResourceVersion: "1", Generation: 2}}
	cs := kubefake.NewClientset(web)
	status := write.NewStatusWriter(cs.AppsV1().Deployments,
		func(d *appsv1.Deployment) *appsv1.DeploymentStatus { return &d.Status })
	observed := func(st *appsv1.DeploymentStatus) { st.ObservedGeneration = web.Generation }

	ctx := context.Background()
	fmt.Println(status.Update(ctx, web, observed), len(cs.Actions()), "API call")
	web, _ = cs.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
	cs.ClearActions()
	fmt.Println(status.Update(ctx, web, observed), len(cs.Actions()), "API calls")
	// Output:
	// <nil> 1 API call
	// <nil> 0 API calls
}

// An owned ConfigMap is created with a controller reference to its owner, and left alone
// once it is as desired.
func ExampleOwned_CreateOrUpdate() {
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web"}}
	cs := kubefake.NewClientset()
	configMaps := write.NewOwned[*appsv1.Deployment](cs.CoreV1().ConfigMaps, appsv1.SchemeGroupVersion.WithKind("Deployment"))
	setMode := func(cm *corev1.ConfigMap) { cm.Data = map[string]string{"mode": "fast"} }

	ctx := context.Background()
	for range 2 {
		change, err := configMaps.CreateOrUpdate(ctx, web, "shop", "web-settings", setMode)
		fmt.Println(change, err)
	}
	cm, _ := cs.CoreV1().ConfigMaps("shop").Get(ctx, "web-settings", metav1.GetOptions{})
	ref := metav1.GetControllerOf(cm)
	fmt.Println(cm.Data, "controlled by", ref.Kind, ref.Name)
	// Output:
	// created <nil>
	// unchanged <nil>
	// map[mode:fast] controlled by Deployment web
}

// A Recorder writes events while it runs, next to the program's controllers.
func ExampleRecorder() {
	cs := kubefake.NewClientset()
	recorder, err := write.NewRecorder(cs, "website-operator")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- recorder.Run(ctx) }()

	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	recorder.Eventf(web, nil, corev1.EventTypeNormal, "Scaled", "Scale", "scaled to %d replicas", 3)

	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := cs.EventsV1().Events("shop").List(ctx, metav1.ListOptions{})
		if err != nil || len(events.Items) == 0 {
			return false, err
		}
		e := events.Items[0]
		fmt.Println(e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note)
		return true, nil
	})
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// Deployment web Scaled scaled to 3 replicas
	// stopped: <nil>
}
