//go:build unix

package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/crd"
)

// WebhookCertificates are a certificate authority of their own and a serving certificate
// it signed for 127.0.0.1 and localhost, written to Dir as CertName and KeyName (tls.crt
// and tls.key, the names a webhook server reads by default), for a test's webhook
// server. Give CABundle to [Environment.InstallWebhooks]; Rotate replaces the files with a
// new certificate of the same authority, as cert-manager or a Secret update would.
type WebhookCertificates struct {
	Dir, CertName, KeyName string
	// CABundle is the authority's certificate in PEM: what a webhook configuration's
	// caBundle holds.
	CABundle []byte

	mu sync.Mutex
	ca *pki
}

// NewWebhookCertificates generates an authority and a serving certificate and writes them
// to dir, created if missing (usually t.TempDir()).
func NewWebhookCertificates(dir string) (*WebhookCertificates, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	ca, err := newCA()
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	c := &WebhookCertificates{Dir: dir, CertName: "tls.crt", KeyName: "tls.key", CABundle: ca.caCertPEM, ca: ca}
	if _, err := c.Rotate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Rotate issues a new serving certificate and replaces the files with it, each by an
// atomic rename (the certificate first, then the key, as a file-by-file copy would leave
// them for a moment), and returns its serial number.
func (c *WebhookCertificates) Rotate() (*big.Int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	certPEM, keyPEM, err := c.ca.servingCert("webhook")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	for name, data := range map[string][]byte{c.CertName: certPEM, c.KeyName: keyPEM} {
		tmp := filepath.Join(c.Dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(c.Dir, name)); err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return cert.SerialNumber, nil
}

// Listen listens on a free port of 127.0.0.1, the address the certificate is for, and
// returns the listener, for the test's webhook server (webhook.ServerOptions.Listener),
// and the server's URL, for [WebhookInstallOptions].
func (c *WebhookCertificates) Listen() (net.Listener, string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("testenv: %w", err)
	}
	return l, "https://" + l.Addr().String(), nil
}

// WebhookInstallOptions say what [Environment.InstallWebhooks] installs, pointing at a
// test's webhook server.
type WebhookInstallOptions struct {
	// URL is the base URL of the server, https://127.0.0.1:PORT: the API server runs on
	// the same host.
	URL string
	// CABundle verifies the server's certificate ([WebhookCertificates.CABundle]).
	CABundle []byte
	// Mutating and Validating are webhook configurations as a program ships them: each
	// webhook's clientConfig names a Service with a path (or holds a URL that is a path,
	// "/validate-..."), which becomes URL + that path, with CABundle.
	Mutating   []*admissionregistrationv1.MutatingWebhookConfiguration
	Validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	// CRDs and Definitions are installed (as [Environment.InstallCRDs] and
	// [Environment.InstallDefinitions] do) with their conversion webhook's clientConfig
	// turned into URL + its path, with CABundle, in the same way.
	CRDs        []*apiextensionsv1.CustomResourceDefinition
	Definitions []*crd.Definition
}

// probeLabel marks the objects that check that the API server calls webhooks.
const probeLabel = "testenv.typedinformer.io/webhook-probe"

// InstallWebhooks installs webhook configurations and CRDs with conversion webhooks
// pointing at a test's webhook server, as opts says, without modifying opts' values, and
// returns once the API server uses them: the server answers TLS handshakes with a
// certificate CABundle verifies; each CRD is established and served (a CRD created with
// its conversion converts from its first request); and the API server calls webhooks of
// configurations created after the given ones (probes matching only a labelled dry-run
// ConfigMap, removed again), which it sees after the given ones. A configuration or CRD
// that exists already is replaced.
//
// The probes' object is a dry-run ConfigMap in namespace default labelled
// testenv.typedinformer.io/webhook-probe: a given webhook that refuses it (one that
// refuses every ConfigMap, say) may keep InstallWebhooks waiting until ctx ends; exclude
// the label with an objectSelector.
func (env *Environment) InstallWebhooks(ctx context.Context, opts WebhookInstallOptions) error {
	base, err := url.Parse(opts.URL)
	if err != nil || base.Scheme != "https" || base.Host == "" {
		return fmt.Errorf("testenv: webhooks: the server's URL %q is not https://host:port", opts.URL)
	}
	if err := waitTLS(ctx, base.Host, opts.CABundle); err != nil {
		return fmt.Errorf("testenv: webhooks: %w", err)
	}
	point := func(cc *admissionregistrationv1.WebhookClientConfig) error {
		u, err := urlOf(opts.URL, cc.Service, cc.URL)
		cc.URL, cc.Service, cc.CABundle = u, nil, opts.CABundle
		return err
	}
	var mutating []*admissionregistrationv1.MutatingWebhookConfiguration
	for _, c := range opts.Mutating {
		c = c.DeepCopy()
		for i := range c.Webhooks {
			if err := point(&c.Webhooks[i].ClientConfig); err != nil {
				return fmt.Errorf("testenv: webhook %s of %s: %w", c.Webhooks[i].Name, c.Name, err)
			}
		}
		mutating = append(mutating, c)
	}
	var validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	for _, c := range opts.Validating {
		c = c.DeepCopy()
		for i := range c.Webhooks {
			if err := point(&c.Webhooks[i].ClientConfig); err != nil {
				return fmt.Errorf("testenv: webhook %s of %s: %w", c.Webhooks[i].Name, c.Name, err)
			}
		}
		validating = append(validating, c)
	}
	pointCRD := func(c *apiextensionsv1.CustomResourceConversion) error {
		if c == nil || c.Webhook == nil || c.Webhook.ClientConfig == nil {
			return nil
		}
		cc := c.Webhook.ClientConfig
		var svc *admissionregistrationv1.ServiceReference
		if cc.Service != nil {
			svc = &admissionregistrationv1.ServiceReference{Path: cc.Service.Path}
		}
		u, err := urlOf(opts.URL, svc, cc.URL)
		cc.URL, cc.Service, cc.CABundle = u, nil, opts.CABundle
		return err
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, len(opts.CRDs))
	for i, c := range opts.CRDs {
		crds[i] = c.DeepCopy()
		if err := pointCRD(crds[i].Spec.Conversion); err != nil {
			return fmt.Errorf("testenv: CRD %s: %w", c.Name, err)
		}
	}
	defs := make([]*crd.Definition, len(opts.Definitions))
	for i, d := range opts.Definitions {
		cp := *d
		cp.Conversion = d.Conversion.DeepCopy()
		if err := pointCRD(cp.Conversion); err != nil {
			return fmt.Errorf("testenv: Definition of %s: %w", d.Kind, err)
		}
		defs[i] = &cp
	}

	cfg, closeConns := env.ownConnections()
	defer closeConns()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	regs := cs.AdmissionregistrationV1()
	for _, c := range mutating {
		if err := replace(ctx, c, regs.MutatingWebhookConfigurations().Create, regs.MutatingWebhookConfigurations().Update,
			regs.MutatingWebhookConfigurations().Get); err != nil {
			return fmt.Errorf("testenv: MutatingWebhookConfiguration %s: %w", c.Name, err)
		}
	}
	for _, c := range validating {
		if err := replace(ctx, c, regs.ValidatingWebhookConfigurations().Create, regs.ValidatingWebhookConfigurations().Update,
			regs.ValidatingWebhookConfigurations().Get); err != nil {
			return fmt.Errorf("testenv: ValidatingWebhookConfiguration %s: %w", c.Name, err)
		}
	}
	if len(crds) > 0 {
		if err := env.InstallCRDs(ctx, crds...); err != nil {
			return err
		}
	}
	if len(defs) > 0 {
		if err := env.InstallDefinitions(ctx, defs...); err != nil {
			return err
		}
	}
	if len(mutating)+len(validating) > 0 {
		if err := probeWebhooks(ctx, cs, opts.CABundle); err != nil {
			return fmt.Errorf("testenv: waiting for the API server to call the webhooks: %w", err)
		}
	}
	env.log.V(1).Info("Installed webhooks", "url", opts.URL, "mutating", len(mutating), "validating", len(validating), "crds", len(crds)+len(defs))
	return nil
}

// urlOf returns base followed by the service's path, or by u when it is a path; u when it
// is a URL already.
func urlOf(base string, svc *admissionregistrationv1.ServiceReference, u *string) (*string, error) {
	switch {
	case svc != nil:
		return ptr.To(strings.TrimSuffix(base, "/") + ptr.Deref(svc.Path, "/")), nil
	case u != nil && strings.HasPrefix(*u, "/"):
		return ptr.To(strings.TrimSuffix(base, "/") + *u), nil
	case u != nil:
		return u, nil
	}
	return nil, errors.New("the clientConfig names neither a service nor a URL")
}

// waitTLS waits until a TLS handshake with host succeeds with a certificate caBundle
// verifies.
func waitTLS(ctx context.Context, host string, caBundle []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		return errors.New("the CA bundle holds no PEM certificate")
	}
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return poll(ctx, func(ctx context.Context) (string, error) {
		conn, err := dialer.DialContext(ctx, "tcp", host)
		if err != nil {
			return fmt.Sprintf("the webhook server at %s does not answer a TLS handshake: %v", host, err), nil
		}
		return "", conn.Close()
	})
}

// object is a webhook configuration.
type object interface {
	*admissionregistrationv1.MutatingWebhookConfiguration | *admissionregistrationv1.ValidatingWebhookConfiguration
	metav1.Object
}

// replace creates obj, or updates the one of its name.
func replace[T object](ctx context.Context, obj T,
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	get func(context.Context, string, metav1.GetOptions) (T, error)) error {
	_, err := create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	old, err := get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	obj.SetResourceVersion(old.GetResourceVersion())
	_, err = update(ctx, obj, metav1.UpdateOptions{})
	return err
}

// probeWebhooks returns once the API server sees the configurations created so far: it
// creates a mutating probe configuration, whose webhook calls a closed port, and makes
// dry-run creates of a ConfigMap only it matches until one fails naming it; deletes it
// and does the same with a validating probe, which the API server calls only once it no
// longer calls the mutating one. The API server's caches of each kind of configuration
// see them in the order they were created.
func probeWebhooks(ctx context.Context, cs kubernetes.Interface, caBundle []byte) error {
	id := randomHex(6)
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{probeLabel: id}}
	cc := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/probe"), CABundle: caBundle}
	rules := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	// Mutating webhooks are called in the order of their configurations' names: "0-"
	// sorts the probe before nearly every other, so that its failure is the one reported
	// even when another webhook would refuse the probe's ConfigMap.
	name := "0-testenv-probe-" + id
	probe := func(webhook string) error {
		return poll(ctx, func(ctx context.Context) (string, error) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-probe-", Labels: map[string]string{probeLabel: id}}}
			_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && strings.Contains(err.Error(), webhook) {
				return "", nil
			}
			return fmt.Sprintf("the API server does not call webhook %s yet (a dry-run create: %v)", webhook, err), nil
		})
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mutating." + id + ".probe.testenv.typedinformer.io", ClientConfig: cc, Rules: rules,
			ObjectSelector: selector, FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}}}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		return err
	}
	err := probe(mutating.Webhooks[0].Name)
	err = errors.Join(err, cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}))
	if err != nil {
		return err
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "validating." + id + ".probe.testenv.typedinformer.io", ClientConfig: cc, Rules: rules,
			ObjectSelector: selector, FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}}}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		return err
	}
	err = probe(validating.Webhooks[0].Name)
	return errors.Join(err, cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}))
}
