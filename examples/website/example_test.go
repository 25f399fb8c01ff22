package website_test

import (
	"context"
	"log"
	"os"

	"github.com/typedinformer/typedinformer/typed/predicate"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/webhook"
	"github.com/typedinformer/typedinformer/typed/write"
)

// A controller of Websites that owns their Deployments, wired with the manager and its
// Builder: the README's "A typed controller in one page". It needs a cluster, so it is
// only compiled; the operator (New) is this with a ConfigMap, a finalizer, status and
// Events, and its end-to-end test runs it.
func Example_builder() {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		log.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	m := manager.New(manager.Options{HealthProbeAddress: ":8081", LeaderElection: &leaderelection.Config{
		Client: cs.CoordinationV1(), Namespace: "default", Name: "website-operator", Identity: os.Getenv("POD_NAME")}})

	websites, err := client.ForResource[*website.Website](cfg, website.Resource) // a CRD's Go struct, no codegen
	if err != nil {
		log.Fatal(err)
	}
	b := manager.For(m, manager.Namespaced[*website.Website](websites)).
		WithKind(website.Kind).WithPredicates(predicate.GenerationChanged) // status writes do not reconcile
	deployments := manager.Owns(b, manager.Namespaced[*appsv1.Deployment](cs.AppsV1().Deployments))
	owned := write.NewOwned[*website.Website](cs.AppsV1().Deployments, website.Kind).WithCache(deployments)
	_, err = b.Complete(typed.ReconcilerFunc[*website.Website](func(ctx context.Context, req typed.Request[*website.Website]) (typed.Result, error) {
		if req.Deleted {
			return typed.Result{}, nil // the garbage collector deletes the Deployment
		}
		w, labels := req.Object, map[string]string{"website": req.Name}
		_, err := owned.CreateOrUpdate(ctx, w, w.Namespace, w.Name, func(d *appsv1.Deployment) {
			d.Spec.Replicas, d.Spec.Selector = ptr.To(w.Spec.Replicas), &metav1.LabelSelector{MatchLabels: labels}
			d.Spec.Template.Labels = labels
			if len(d.Spec.Template.Spec.Containers) == 0 {
				d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "web"}}
			}
			d.Spec.Template.Spec.Containers[0].Image = website.Image
		})
		return typed.Result{}, err // an error retries the key with backoff
	}))
	if err != nil {
		log.Fatal(err) // every mistake of the declaration, at once
	}
	log.Fatal(m.Run(ctx)) // caches on every replica, the loop while leading, /healthz, /readyz
}

// An operator replica that also serves the Website's webhooks (defaulting, validation,
// conversion between v1 and v2) from the certificate a cert-manager Certificate or a
// Secret volume puts in /tmp/k8s-webhook-server/serving-certs; /readyz waits for them.
// It needs a cluster, so it is only compiled.
func Example_webhooks() {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		log.Fatal(err)
	}
	op, err := website.New(kubernetes.NewForConfigOrDie(cfg), cfg, website.Options{
		HealthProbeAddress: ":8081",
		LeaderElection:     leaderelection.Config{Identity: os.Getenv("POD_NAME")},
		Webhooks:           &webhook.ServerOptions{CertDir: "/tmp/k8s-webhook-server/serving-certs"}, // port 9443
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(op.Run(context.Background()))
}
