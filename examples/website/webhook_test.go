//go:build unix

package website_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/testenv"
	"github.com/typedinformer/typedinformer/typed/webhook"
)

// The apiVersion and kind of each version, which the dynamic client sends.
var (
	v1Type = metav1.TypeMeta{APIVersion: website.Kind.GroupVersion().String(), Kind: website.Kind.Kind}
	v2Type = metav1.TypeMeta{APIVersion: website.KindV2.GroupVersion().String(), Kind: website.KindV2.Kind}
)

// webhooks is the test's webhook server: an operator replica given Options.Webhooks.
type webhooks struct {
	certs *testenv.WebhookCertificates
	addr  string
}

// serveWebhooks starts a replica of the operator that serves the webhooks, in a
// namespace of its own, and installs the webhook configurations and the CRD, with its
// conversion, pointing at it; it returns once the API server calls them.
func (c *cluster) serveWebhooks(t *testing.T, env *testenv.Environment) {
	t.Helper()
	certs, err := testenv.NewWebhookCertificates(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, url, err := certs.Listen()
	if err != nil {
		t.Fatal(err)
	}
	c.hooks = &webhooks{certs: certs, addr: l.Addr().String()}
	c.start(t, c.namespace(t), "webhooks", func(o *website.Options) {
		o.Webhooks = &webhook.ServerOptions{Listener: l, CertDir: certs.Dir}
	})
	mutating, validating := website.WebhookConfigurations()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := env.InstallWebhooks(ctx, testenv.WebhookInstallOptions{URL: url, CABundle: certs.CABundle,
		Mutating: []*admissionregistrationv1.MutatingWebhookConfiguration{mutating}, Validating: []*admissionregistrationv1.ValidatingWebhookConfiguration{validating},
		Definitions: []*crd.Definition{website.Definition()}}); err != nil {
		t.Fatal(err)
	}
}

// serial returns the serial number of the certificate the webhook server serves a new
// TLS connection, verified with the CA bundle the API server has.
func (h *webhooks) serial(t *testing.T) *big.Int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.certs.CABundle)
	conn, err := tls.Dial("tcp", h.addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// webhookTests are the subtests of the webhooks, through the API server.
func (c *cluster) webhookTests(t *testing.T) {
	ctx := context.Background()
	tooLong := strings.Repeat("é", website.MaxMessageLength+1) // characters, not bytes

	t.Run("the validating webhook refuses a message that is too long, in either version", func(t *testing.T) {
		ns := c.namespace(t)
		c.refusedTooLong(t, errOf(c.websites(ns).Create(ctx, &website.Website{TypeMeta: v1Type, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "long"},
			Spec: website.WebsiteSpec{Message: tooLong, Replicas: 1}}, metav1.CreateOptions{})))
		c.refusedTooLong(t, errOf(c.websitesV2(ns).Create(ctx, &website.WebsiteV2{TypeMeta: v2Type, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "long2"},
			Spec: website.WebsiteSpecV2{Page: website.Page{Body: tooLong}, Replicas: 1}}, metav1.CreateOptions{})))
		// At the limit is allowed; an update past it is refused.
		w := c.create(t, ns, "limit", tooLong[len("é"):], 1)
		w.Spec.Message = tooLong
		c.refusedTooLong(t, errOf(c.websites(ns).Update(ctx, w, metav1.UpdateOptions{})))
	})

	t.Run("the defaulting webhook gives a Website without a title its message's first line", func(t *testing.T) {
		ns := c.namespace(t)
		if w := c.create(t, ns, "untitled", "Welcome!\nThis is a page.", 1); w.Spec.Title != "Welcome!" {
			t.Errorf("title %q; want the message's first line", w.Spec.Title)
		}
		titled, err := c.websites(ns).Create(ctx, &website.Website{TypeMeta: v1Type, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "titled"},
			Spec: website.WebsiteSpec{Message: "Welcome!", Title: "Home", Replicas: 1}}, metav1.CreateOptions{})
		if err != nil || titled.Spec.Title != "Home" {
			t.Errorf("a Website with a title: %v, title %q; want it kept", err, titled.Spec.Title)
		}
	})

	t.Run("a Website written as v1 is read as v2, and back as v1 with nothing lost", func(t *testing.T) {
		ns := c.namespace(t)
		w, err := c.websites(ns).Create(ctx, &website.Website{TypeMeta: v1Type,
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "versions", Labels: map[string]string{"tier": "web"}, Annotations: map[string]string{"note": "kept"}},
			Spec:       website.WebsiteSpec{Message: "Hello\nworld", Title: "Hi", Replicas: 3}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v2, err := c.websitesV2(ns).Get(ctx, "versions", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := website.WebsiteSpecV2{Page: website.Page{Title: "Hi", Body: "Hello\nworld"}, Replicas: 3}
		if diff := cmp.Diff(want, v2.Spec); diff != "" || v2.APIVersion != website.KindV2.GroupVersion().String() {
			t.Errorf("read as v2 (%s): spec (-want +got):\n%s", v2.APIVersion, diff)
		}
		if diff := cmp.Diff(w.ObjectMeta, v2.ObjectMeta); diff != "" {
			t.Errorf("read as v2: metadata (-v1 +v2):\n%s", diff)
		}
		// Written back as v2 (its replicas changed), read as v1: only what changed changed.
		v2.Spec.Replicas = 4
		if _, err := c.websitesV2(ns).Update(ctx, v2, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		back, err := c.websites(ns).Get(ctx, "versions", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.Spec.Replicas = 4
		if diff := cmp.Diff(w, back, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "Generation", "ManagedFields")); diff != "" {
			t.Errorf("v1 → v2 → v1 (-want +got):\n%s", diff)
		}
		// And the other way: written as v2, read as v1, and back as v2.
		created, err := c.websitesV2(ns).Create(ctx, &website.WebsiteV2{TypeMeta: v2Type, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "from-v2"}, Spec: want}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v1, err := c.websites(ns).Get(ctx, "from-v2", metav1.GetOptions{})
		if err != nil || v1.Spec != (website.WebsiteSpec{Message: "Hello\nworld", Title: "Hi", Replicas: 3}) {
			t.Fatalf("written as v2, read as v1: %+v, %v", v1.Spec, err)
		}
		again, err := c.websitesV2(ns).Get(ctx, "from-v2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(created, again); diff != "" {
			t.Errorf("v2 → v1 → v2 (-want +got):\n%s", diff)
		}
	})

	t.Run("certificates replaced on disk are served without a restart", func(t *testing.T) {
		ns := c.namespace(t)
		before := c.hooks.serial(t)
		want, err := c.hooks.certs.Rotate()
		if err != nil {
			t.Fatal(err)
		}
		if got := c.hooks.serial(t); got.Cmp(want) != 0 || got.Cmp(before) == 0 {
			t.Fatalf("after the files were replaced, a TLS client is served serial %v; want the new %v (before: %v)", got, want, before)
		}
		// The API server's calls keep succeeding: all three webhooks answer.
		c.refusedTooLong(t, errOf(c.websites(ns).Create(ctx, &website.Website{TypeMeta: v1Type, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "long"},
			Spec: website.WebsiteSpec{Message: tooLong, Replicas: 1}}, metav1.CreateOptions{})))
		if w := c.create(t, ns, "after", "Rotated", 1); w.Spec.Title != "Rotated" {
			t.Errorf("title %q; want it defaulted", w.Spec.Title)
		}
		if _, err := c.websitesV2(ns).Get(ctx, "after", metav1.GetOptions{}); err != nil {
			t.Errorf("read as v2 after the rotation: %v", err)
		}
	})
}

// refusedTooLong checks that a write was refused by the validating webhook for its
// message's length, as an invalid field.
func (c *cluster) refusedTooLong(t *testing.T, err error) {
	t.Helper()
	want := "spec.message: Too long: may not be more than 1000 characters"
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "validate.websites."+website.Kind.Group) {
		t.Errorf("write of a message too long: %v; want Invalid from the validating webhook saying %q", err, want)
	}
}

// errOf returns a call's error.
func errOf[V any](_ V, err error) error { return err }
