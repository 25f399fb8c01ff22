//go:build unix

package manager_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/testenv"
	"github.com/typedinformer/typedinformer/typed/webhook"
)

// readyz returns the body of the Manager's readiness probe.
func readyz(m *manager.Manager) (int, string) {
	w := httptest.NewRecorder()
	m.ReadyzHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return w.Code, w.Body.String()
}

// Options.Webhook runs the webhook server on every replica while Run runs, /readyz
// waits for it, and it stops with Run.
func TestManagerServesWebhooksAndReadinessWaitsForThem(t *testing.T) {
	certs, err := testenv.NewWebhookCertificates(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := listenLocal(t)
	srv := webhook.NewServer(webhook.ServerOptions{Listener: l, CertDir: certs.Dir})
	err = webhook.For[*corev1.Pod](srv).WithValidator(webhook.ValidatorFuncs[*corev1.Pod]{
		Create: func(ctx context.Context, p *corev1.Pod) (webhook.Warnings, error) {
			return nil, webhook.Deny("no pods here")
		},
	}).Complete()
	if err != nil {
		t.Fatal(err)
	}
	m := manager.New(manager.Options{Webhook: srv})
	if _, body := readyz(m); !strings.Contains(body, "[-]webhook server failed: the webhook server is not listening") {
		t.Errorf("/readyz before Run:\n%s\nwant the webhook server not ready", body)
	}
	r := run(t, m)
	eventually(t, "/readyz passes once the webhook server listens", func() bool {
		code, body := readyz(m)
		return code == http.StatusOK && strings.Contains(body, "[+]webhook server ok")
	})

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certs.CABundle)
	url := "https://" + l.Addr().String() + webhook.ValidatePath(corev1.SchemeGroupVersion.WithKind("Pod"))
	// A review answered by the webhook: the denial's message.
	denial := func() (string, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
		defer tr.CloseIdleConnections()
		obj, _ := json.Marshal(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}})
		body, _ := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: obj}}})
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(out, &review); err != nil || review.Response == nil || review.Response.Result == nil {
			return "", fmt.Errorf("answer %s: %v", out, err)
		}
		return review.Response.Result.Message, nil
	}
	if got, err := denial(); err != nil || got != "no pods here" {
		t.Errorf("the validating webhook answered %q, %v; want the denial", got, err)
	}
	// A runnable finishing after Run's context ended can still reach the webhooks (a
	// loop's last writes may go through them): the server stops after the runnables.
	lastWrite := make(chan error, 1)
	if err := m.Add("finishing", manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		got, err := denial()
		if err == nil && got != "no pods here" {
			err = fmt.Errorf("answered %q", got)
		}
		lastWrite <- err
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, lastWrite, "the finishing runnable's review"); err != nil {
		t.Errorf("a review during the shutdown: %v; want the webhook's answer", err)
	}
	if _, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		t.Error("the webhook server still listens after Run returned")
	}
}

// A webhook server that cannot start (no certificate) is Run's error.
func TestAWebhookServerThatCannotStartIsRunsError(t *testing.T) {
	m := manager.New(manager.Options{Webhook: webhook.NewServer(webhook.ServerOptions{Listener: listenLocal(t), CertDir: t.TempDir()})})
	if err := m.Run(testContext(t)); !errors.Is(err, webhook.ErrCertificate) || !strings.Contains(err.Error(), "webhook server") {
		t.Errorf("Run = %v; want the webhook server's ErrCertificate", err)
	}
	goleak.VerifyNone(t)
}
