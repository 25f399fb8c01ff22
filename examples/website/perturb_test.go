package website_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/perturb"
)

// TestWebsiteOperatorUnderPerturbation runs a Website scenario (two sites made, one
// changed and its Deployment becoming ready, the other deleted through the finalizer)
// unperturbed and then crashed after each of the operator's writes (a successor waits
// for the Lease the crashed replica did not release), with lagging caches and with
// missed intermediate states: every run ends as the unperturbed one does.
func TestWebsiteOperatorUnderPerturbation(t *testing.T) {
	operator, steps := websiteScenario()
	rep := perturb.Test(t, operator, steps, perturb.Options{Definitions: []*crd.Definition{website.Definition()}, Runs: 24, Budget: time.Minute})
	if rep != nil && (rep.Runs == 0 || len(rep.Writes) < 8) {
		t.Errorf("%d perturbed runs of a reference with writes %q: the scenario did not exercise the operator", rep.Runs, rep.Writes)
	}
}

// websiteScenario returns the operator, one replica per process, and the scenario.
func websiteScenario() (perturb.Controller, []perturb.Step) {
	var replicas atomic.Int32
	operator := func(ctx context.Context, env perturb.Env) error {
		o, err := website.New(env.Clientset, nil, website.Options{Namespace: env.Namespace, Websites: client.FromDynamicNamespaced[*website.Website](env.Dynamic.Resource(website.Resource)), LeaderElection: leaderelection.Config{
			Identity:      fmt.Sprintf("replica-%d", replicas.Add(1)), // a fresh process, not the crashed one back
			LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}})
		if err != nil {
			return err
		}
		return o.Run(ctx)
	}
	websites := func(env perturb.Env) *client.Dynamic[*website.Website] {
		return client.FromDynamicNamespaced[*website.Website](env.Dynamic.Resource(website.Resource))(env.Namespace)
	}
	create := func(name, message string, replicas int32) perturb.Step {
		return perturb.Step{Name: "create " + name, Do: func(ctx context.Context, env perturb.Env) error {
			_, err := websites(env).Create(ctx, &website.Website{TypeMeta: metav1.TypeMeta{APIVersion: website.Kind.GroupVersion().String(), Kind: website.Kind.Kind},
				ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name}, Spec: website.WebsiteSpec{Message: message, Replicas: replicas}}, metav1.CreateOptions{})
			return err
		}}
	}
	steps := []perturb.Step{
		create("hello", "Hello", 1),
		create("bye", "So long", 1),
		{Name: "change hello", Do: func(ctx context.Context, env perturb.Env) error {
			w, err := websites(env).Get(ctx, "hello", metav1.GetOptions{})
			if err != nil {
				return err
			}
			w.Spec.Message, w.Spec.Replicas = "Hello, world", 2
			_, err = websites(env).Update(ctx, w, metav1.UpdateOptions{})
			return err
		}},
		{Name: "hello's pods become ready", Do: func(ctx context.Context, env perturb.Env) error {
			d, err := env.Clientset.AppsV1().Deployments(env.Namespace).Get(ctx, "hello", metav1.GetOptions{})
			if err != nil {
				return err
			}
			// What the deployment controller would write, but for its observedGeneration:
			// this step stands for that controller, and the generation it would observe
			// depends on whether the operator's update came first, which is no matter
			// of the operator's correctness.
			d.Status = appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
			_, err = env.Clientset.AppsV1().Deployments(env.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
			return err
		}},
		{Name: "delete bye", Do: func(ctx context.Context, env perturb.Env) error {
			return websites(env).Delete(ctx, "bye", metav1.DeleteOptions{})
		}},
	}
	return operator, steps
}
