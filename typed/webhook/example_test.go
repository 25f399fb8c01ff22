package webhook_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/typedinformer/typedinformer/typed/webhook"
)

// Defaulting and validating webhooks for Pods, served over TLS from the certificate files
// of CertDir (reloaded when they change), at controller-runtime's paths. Give the Server
// to a Manager (manager.Options.Webhook) to run it beside the probes, or Run it.
func ExampleFor() {
	srv := webhook.NewServer(webhook.ServerOptions{CertDir: "/tmp/k8s-webhook-server/serving-certs"})
	err := webhook.For[*corev1.Pod](srv).
		WithDefaulter(webhook.DefaulterFunc[*corev1.Pod](func(ctx context.Context, p *corev1.Pod) (webhook.Warnings, error) {
			if p.Spec.ServiceAccountName == "" {
				p.Spec.ServiceAccountName = "restricted"
			}
			return nil, nil
		})).
		WithValidator(webhook.ValidatorFuncs[*corev1.Pod]{
			Create: func(ctx context.Context, p *corev1.Pod) (webhook.Warnings, error) {
				var errs field.ErrorList
				for i, c := range p.Spec.Containers {
					if strings.HasSuffix(c.Image, ":latest") {
						errs = append(errs, field.Invalid(field.NewPath("spec", "containers").Index(i).Child("image"), c.Image, "pin a version"))
					}
				}
				return nil, webhook.DenyFields(errs) // 422 Invalid, one cause per field
			},
		}).
		Complete()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(srv.Paths())
	// Output: [/mutate--v1-pod /validate--v1-pod]
}
