package write_test

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/typedinformer/typedinformer/typed/write"
)

// A controller and an autoscaler share a Deployment: each applies only its own fields,
// and neither reverts the other. Setting the autoscaler's field without force is a
// conflict that names the field and its manager. (A manager.Manager puts its field
// manager in the reconcile's context, as WithFieldManager does here.)
func ExampleApplier_Apply() {
	cs := kubefake.NewClientset()
	ctx := write.WithFieldManager(context.Background(), "website-operator")
	deployments := write.NewApplier(cs.AppsV1().Deployments)
	autoscaler := deployments.WithFieldManager("autoscaler")

	image := func(image string) *appsv1ac.DeploymentApplyConfiguration {
		return appsv1ac.Deployment("web", "shop").WithSpec(appsv1ac.DeploymentSpec().WithTemplate(
			corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().WithContainers(
				corev1ac.Container().WithName("web").WithImage(image)))))
	}
	_, _ = deployments.Apply(ctx, image("nginx:1.27"))
	_, _ = autoscaler.Apply(ctx, appsv1ac.Deployment("web", "shop").WithSpec(appsv1ac.DeploymentSpec().WithReplicas(5)))
	d, _ := deployments.Apply(ctx, image("nginx:1.28")) // the replicas are not the controller's
	fmt.Println(*d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image)

	scaled := image("nginx:1.28")
	scaled.Spec.WithReplicas(1)
	_, err := deployments.Apply(ctx, scaled)
	var conflict *write.ApplyConflictError
	if errors.As(err, &conflict) {
		fmt.Println(conflict.Conflicts[0].Field, "is owned by", conflict.Conflicts[0].Manager)
	}
	// Output:
	// 5 nginx:1.28
	// .spec.replicas is owned by autoscaler
}

// A Job's spec cannot change: CreateOnly creates it when missing, and finds it when the
// cache has not seen it yet, with no error and no second Job.
func ExampleOwned_CreateOnly() {
	owner := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web"}}
	cs := kubefake.NewClientset()
	jobs := write.NewOwned[*appsv1.Deployment](cs.BatchV1().Jobs, appsv1.SchemeGroupVersion.WithKind("Deployment")).
		WithCache(mapCache[*batchv1.Job]{}) // a cache that has not seen the Job yet
	migrate := func(j *batchv1.Job) {
		j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		j.Spec.Template.Spec.Containers = []corev1.Container{{Name: "migrate", Image: "migrate:1"}}
	}
	for range 2 {
		_, change, err := jobs.CreateOnly(context.Background(), owner, "shop", "web-migrate", migrate)
		fmt.Println(change, err)
	}
	list, _ := cs.BatchV1().Jobs("shop").List(context.Background(), metav1.ListOptions{})
	fmt.Println(len(list.Items), "job")
	// Output:
	// created <nil>
	// unchanged <nil>
	// 1 job
}
