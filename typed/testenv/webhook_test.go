//go:build unix

package testenv_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/typed/testenv"
	"github.com/typedinformer/typedinformer/typed/webhook"
)

// webhookSteps serves a validating webhook that refuses labelled ConfigMaps, installs
// it with InstallWebhooks, and checks that the very next create is refused by it: no
// retry, no sleep.
func webhookSteps(t *testing.T, env *testenv.Environment, admin kubernetes.Interface) {
	certs, err := testenv.NewWebhookCertificates(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, url, err := certs.Listen()
	if err != nil {
		t.Fatal(err)
	}
	srv := webhook.NewServer(webhook.ServerOptions{Listener: l, CertDir: certs.Dir})
	var calls atomic.Int32
	refuse, err := webhook.NewValidating(corev1.SchemeGroupVersion.WithKind("ConfigMap"), webhook.ValidatorFuncs[*corev1.ConfigMap]{
		Create: func(ctx context.Context, cm *corev1.ConfigMap) (webhook.Warnings, error) {
			calls.Add(1)
			return nil, webhook.Deny("ConfigMap %s refused by the test's webhook", cm.Name)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Register("/refuse", refuse); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the webhook server: %v", err)
		}
	}()

	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "refuse-labelled"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "refuse.testenv.example.com",
			// As a program ships it: behind a Service, which InstallWebhooks replaces.
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "system", Name: "webhooks", Path: ptr("/refuse")}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"refuse": "yes"}},
			FailurePolicy:  &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}}}
	for name, opts := range map[string]testenv.WebhookInstallOptions{
		"an http URL":  {URL: "http://" + l.Addr().String(), CABundle: certs.CABundle},
		"no CA bundle": {URL: url},
		"a clientConfig with neither service nor URL": {URL: url, CABundle: certs.CABundle,
			Validating: []*admissionregistrationv1.ValidatingWebhookConfiguration{{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "x.example.com"}}}}},
	} {
		if err := env.InstallWebhooks(timeout(t), opts); err == nil || !strings.HasPrefix(err.Error(), "testenv:") {
			t.Errorf("%s: %v; want an error of testenv", name, err)
		}
	}
	if err := env.InstallWebhooks(timeout(t), testenv.WebhookInstallOptions{URL: url, CABundle: certs.CABundle,
		Validating: []*admissionregistrationv1.ValidatingWebhookConfiguration{config}}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(timeout(t), config.Name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}()
	if config.Webhooks[0].ClientConfig.Service == nil || config.Webhooks[0].ClientConfig.URL != nil {
		t.Error("InstallWebhooks modified the configuration it was given")
	}
	_, err = admin.CoreV1().ConfigMaps(namespace).Create(timeout(t), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "labelled", Labels: map[string]string{"refuse": "yes"}}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "ConfigMap labelled refused by the test's webhook") || calls.Load() != 1 {
		t.Errorf("the first create after InstallWebhooks: %v (webhook called %d times); want the webhook's refusal", err, calls.Load())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Error("the create timed out")
	}
}
