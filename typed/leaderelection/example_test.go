package leaderelection_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
)

// A Loop that reconciles only while this replica holds the Lease. The controller's cache
// runs on every replica, so a replica that becomes the leader starts with it warm. lead
// has no error result: it logs the Loop's error, if any.
func ExampleConfig_Run() {
	src := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}})
	configMaps, err := controller.New(src, controller.Options[*corev1.ConfigMap]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	reconciled := make(chan string)
	loop, err := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			select {
			case reconciled <- req.Key:
			case <-ctx.Done():
			}
			return typed.Result{}, nil
		}), typed.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}

	cs := kubefake.NewClientset() // in a cluster: kubernetes.NewForConfig(...)
	le := leaderelection.Config{Client: cs.CoordinationV1(), Namespace: "default", Name: "settings-controller",
		Identity:      "replica-a", // e.g. the pod's name
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- typed.RunAll(ctx, configMaps.Run, func(ctx context.Context) error {
			return le.Run(ctx, func(ctx context.Context) {
				if err := loop.Run(ctx); err != nil {
					klog.FromContext(ctx).Error(err, "reconcile loop")
				}
			})
		})
	}()

	fmt.Println("the leader reconciled", <-reconciled)
	cancel() // the Loop stops; only then is the Lease released
	fmt.Println("stopped:", <-done)
	lease, _ := cs.CoordinationV1().Leases("default").Get(context.Background(), "settings-controller", metav1.GetOptions{})
	fmt.Printf("lease holder: %q\n", *lease.Spec.HolderIdentity)
	// Output:
	// the leader reconciled default/settings
	// stopped: <nil>
	// lease holder: ""
}

// A Config runs work only while this replica holds the Lease; in production the
// work is a Loop's Run.
func ExampleConfig() {
	client := kubefake.NewClientset()
	le := leaderelection.Config{Client: client.CoordinationV1(), Namespace: "default", Name: "mirror",
		Identity: "replica-a", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	err := le.Run(ctx, func(ctx context.Context) {
		fmt.Println("leading")
		cancel() // done: give the Lease up
		<-ctx.Done()
	})
	lease, _ := client.CoordinationV1().Leases("default").Get(context.Background(), "mirror", metav1.GetOptions{})
	fmt.Printf("Run returned %v; lease holder after release: %q\n", err, *lease.Spec.HolderIdentity)
	// Output:
	// leading
	// Run returned <nil>; lease holder after release: ""
}
