//go:build unix

package testenv_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/typed/testenv"
	"github.com/typedinformer/typedinformer/typed/webhook"
)

// Example starts an environment, installs a CRD from YAML, lists its objects as the
// admin, and gives a restricted user read access to them. In a test, start it with
// testenv.Start(t, opts), which stops it when the test ends; StartContext is for
// TestMain and programs. It needs the binaries that testenv.SetupCommand builds, so it
// has no Output line and is only compiled.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	env, err := testenv.StartContext(ctx, testenv.Options{})
	if err != nil {
		log.Fatal(err) // if the binaries are missing, err says which command builds them
	}
	defer env.Stop()

	err = env.InstallCRDYAML(ctx, []byte(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: websites.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: websites, singular: website, kind: Website}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`))
	if err != nil {
		log.Fatal(err)
	}
	websites := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "websites"}
	admin := dynamic.NewForConfigOrDie(env.AdminConfig())
	list, err := admin.Resource(websites).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("websites:", len(list.Items))

	// A user with no permissions, then allowed to read websites in "default".
	alice := kubernetes.NewForConfigOrDie(env.UserConfig("alice", "web-team"))
	_, err = alice.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	fmt.Println("alice may list ConfigMaps:", err == nil)
	err = env.Grant(ctx, "default", testenv.Group("web-team"), rbacv1.PolicyRule{
		APIGroups: []string{"example.com"}, Resources: []string{"websites"}, Verbs: []string{"get", "list", "watch"},
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = dynamic.NewForConfigOrDie(env.UserConfig("alice", "web-team")).Resource(websites).Namespace("default").List(ctx, metav1.ListOptions{})
	fmt.Println("alice may list websites:", err == nil)
}

// ExampleEnvironment_InstallWebhooks serves a validating webhook for ConfigMaps from a
// test's webhook server and has the API server call it: the configuration is written as
// a program ships it (behind a Service), and InstallWebhooks points it at the server.
// It needs the binaries, so it is only compiled.
func ExampleEnvironment_InstallWebhooks() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := testenv.StartContext(ctx, testenv.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer env.Stop()

	certs, err := testenv.NewWebhookCertificates(os.TempDir() + "/webhook-certs")
	if err != nil {
		log.Fatal(err)
	}
	l, url, err := certs.Listen() // 127.0.0.1, which the certificate is for
	if err != nil {
		log.Fatal(err)
	}
	srv := webhook.NewServer(webhook.ServerOptions{Listener: l, CertDir: certs.Dir})
	err = webhook.For[*corev1.ConfigMap](srv).WithValidator(webhook.ValidatorFuncs[*corev1.ConfigMap]{
		Create: func(ctx context.Context, cm *corev1.ConfigMap) (webhook.Warnings, error) {
			if cm.Data["forbidden"] != "" {
				return nil, webhook.Deny("no forbidden key")
			}
			return nil, nil
		}}).Complete()
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Run(ctx) }()

	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	err = env.InstallWebhooks(ctx, testenv.WebhookInstallOptions{URL: url, CABundle: certs.CABundle,
		Validating: []*admissionregistrationv1.ValidatingWebhookConfiguration{{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "configmaps.example.com",
				ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
					Namespace: "system", Name: "webhooks", Path: ptr(webhook.ValidatePath(corev1.SchemeGroupVersion.WithKind("ConfigMap")))}},
				Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
				FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}}}}})
	if err != nil {
		log.Fatal(err)
	}
	// From here, every ConfigMap created goes through the webhook.
}
