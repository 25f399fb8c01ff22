//go:build unix

package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/typed/testenv"
	"github.com/typedinformer/typedinformer/typed/webhook"
)

// serving runs srv until the test ends (or stop is called), returning the certificates
// it serves and its base URL once it is ready.
func serving(t *testing.T, opts webhook.ServerOptions, register func(*webhook.Server)) (srv *webhook.Server, certs *testenv.WebhookCertificates, url string, stop func() error) {
	t.Helper()
	certs, err := testenv.NewWebhookCertificates(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, url, err := certs.Listen()
	if err != nil {
		t.Fatal(err)
	}
	opts.Listener, opts.CertDir = l, certs.Dir
	srv = webhook.NewServer(opts)
	if register != nil {
		register(srv)
	}
	if err := srv.Ready(nil); err == nil {
		t.Error("Ready before Run; want an error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = testwait.Recv(t, done, "Run returns once its context ends")
			if srv.Ready(nil) == nil {
				t.Error("Ready after Run returned; want an error")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testwait.Eventually(t, "the server is ready", func() bool { return srv.Ready(nil) == nil }, testwait.Timeout)
	return srv, certs, url, stop
}

// serial returns the serial number of the certificate a new TLS connection to url is
// served, verified with caBundle.
func serial(t *testing.T, url string, caBundle []byte) *big.Int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

func get(t *testing.T, url string, caBundle []byte) (int, string) {
	t.Helper()
	code, body, err := fetch(url, caBundle)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

// fetch GETs url over a connection of its own, verifying the server with caBundle.
func fetch(url string, caBundle []byte) (int, string, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestServerServesRegisteredHandlersOverTLSFromTheCertificateFiles(t *testing.T) {
	_, certs, url, _ := serving(t, webhook.ServerOptions{}, func(s *webhook.Server) {
		if err := s.Register("/hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello ", r.Proto) })); err != nil {
			t.Fatal(err)
		}
	})
	if code, body := get(t, url+"/hello", certs.CABundle); code != http.StatusOK || body != "hello HTTP/1.1" {
		t.Errorf("GET /hello: %d %q; want 200 over HTTP/1.1 (HTTP/2 is off by default)", code, body)
	}
	if code, _ := get(t, url+"/other", certs.CABundle); code != http.StatusNotFound {
		t.Errorf("GET /other: %d; want 404", code)
	}
	_, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}) //nolint:gosec // the attack
	if err == nil {
		t.Error("a TLS 1.1 handshake succeeded; want TLS 1.2 at least")
	}
}

func TestReplacedCertificateFilesAreServedWithoutARestart(t *testing.T) {
	_, certs, url, _ := serving(t, webhook.ServerOptions{}, nil)
	first := serial(t, url, certs.CABundle)
	want, err := certs.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if got := serial(t, url, certs.CABundle); got.Cmp(want) != 0 || got.Cmp(first) == 0 {
		t.Fatalf("after rotation, served serial %v; want the new %v (the first was %v)", got, want, first)
	}
	// A half-written replacement (a certificate that is not PEM, the key not yet
	// replaced) does not load: the previous pair is still served, until the files load.
	if err := os.WriteFile(filepath.Join(certs.Dir, certs.CertName), []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serial(t, url, certs.CABundle); got.Cmp(want) != 0 {
		t.Errorf("with a broken certificate file, served serial %v; want the previous %v", got, want)
	}
	next, err := certs.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if got := serial(t, url, certs.CABundle); got.Cmp(next) != 0 {
		t.Errorf("once the files load again, served serial %v; want %v", got, next)
	}
}

func TestRunRefusesMissingCertificatesAndASecondRun(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := webhook.NewServer(webhook.ServerOptions{Listener: l, CertDir: t.TempDir()})
	if err := srv.Run(context.Background()); !errors.Is(err, webhook.ErrCertificate) || !strings.Contains(err.Error(), "tls.crt") {
		t.Errorf("Run with no certificate: %v; want ErrCertificate naming the file", err)
	}
	if _, err := l.Accept(); err == nil {
		t.Error("the given listener is still open after Run failed")
	}

	srv, _, _, _ = serving(t, webhook.ServerOptions{}, nil)
	if err := srv.Run(context.Background()); !errors.Is(err, webhook.ErrAlreadyRunning) {
		t.Errorf("a second Run: %v; want ErrAlreadyRunning", err)
	}
}

func TestShutdownLetsReviewsInFlightFinish(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	_, certs, url, stop := serving(t, webhook.ServerOptions{}, func(s *webhook.Server) {
		if err := s.Register("/slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			<-release
			fmt.Fprint(w, "done")
		})); err != nil {
			t.Fatal(err)
		}
	})
	type answer struct {
		code int
		body string
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		code, body, err := fetch(url+"/slow", certs.CABundle)
		answered <- answer{code, body, err}
	}()
	testwait.Recv(t, entered, "the request reaches the handler")
	done := make(chan error, 1)
	go func() { done <- stop() }()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a review was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if a := testwait.Recv(t, answered, "the review in flight is answered"); a.err != nil || a.code != http.StatusOK || a.body != "done" {
		t.Errorf("the review in flight: %d %q, %v; want 200 done", a.code, a.body, a.err)
	}
	if err := testwait.Recv(t, done, "Run returns"); err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestRegisterAndBuilderRefuseWhatCannotWork(t *testing.T) {
	srv := webhook.NewServer(webhook.ServerOptions{})
	ok := http.NotFoundHandler()
	var typedNil http.HandlerFunc
	for name, err := range map[string]error{
		"a relative path": srv.Register("hook", ok),
		"a nil handler":   srv.Register("/a", nil),
		"a typed nil":     srv.Register("/a", typedNil),
		"a nil server":    (*webhook.Server)(nil).Register("/a", ok),
	} {
		if !errors.Is(err, webhook.ErrInvalidOptions) {
			t.Errorf("%s: %v; want ErrInvalidOptions", name, err)
		}
	}
	d := webhook.DefaulterFunc[*corev1.Pod](func(context.Context, *corev1.Pod) (webhook.Warnings, error) { return nil, nil })
	b := webhook.For[*corev1.Pod](srv).WithDefaulter(d).WithValidator(webhook.ValidatorFuncs[*corev1.Pod]{})
	if err := b.Complete(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(srv.Paths()); got != "[/mutate--v1-pod /validate--v1-pod]" {
		t.Errorf("paths %s; want controller-runtime's for a Pod", got)
	}
	if err := b.Complete(); !errors.Is(err, webhook.ErrInvalidOptions) {
		t.Errorf("Complete twice: %v; want ErrInvalidOptions", err)
	}
	if err := webhook.For[*corev1.Pod](srv).WithDefaulter(d).Complete(); !errors.Is(err, webhook.ErrInvalidOptions) {
		t.Errorf("a second defaulter for Pods: %v; want ErrInvalidOptions (its path is taken)", err)
	}
	if err := webhook.For[*corev1.Service](srv).Complete(); !errors.Is(err, webhook.ErrInvalidOptions) {
		t.Errorf("neither a defaulter nor a validator: %v; want ErrInvalidOptions", err)
	}
	if err := webhook.For[*thingV1](srv).WithValidator(webhook.ValidatorFuncs[*thingV1]{}).Complete(); !errors.Is(err, webhook.ErrNoKind) {
		t.Errorf("a custom resource with no WithKind: %v; want ErrNoKind", err)
	}
	if err := webhook.For[*thingV1](nil).Complete(); !errors.Is(err, webhook.ErrInvalidOptions) {
		t.Errorf("a nil Server: %v; want ErrInvalidOptions", err)
	}
	if err := webhook.For[*thingV1](srv).WithKind(thingKind).WithValidator(webhook.ValidatorFuncs[*thingV1]{}).Complete(); err != nil {
		t.Errorf("a custom resource with its kind: %v", err)
	}
}

// Handshakes racing with rotations each get a whole pair, old or new, that the CA
// verifies: never a certificate with the other's key, never a failed handshake.
func TestHandshakesDuringRotationsAlwaysGetAWholePair(t *testing.T) {
	_, certs, url, _ := serving(t, webhook.ServerOptions{}, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Go(func() {
			for range 8 {
				if _, _, err := fetch(url+"/none", certs.CABundle); err != nil {
					errs <- err
				}
			}
		})
	}
	for range 8 {
		if _, err := certs.Rotate(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a request during rotations: %v", err)
	}
}

// The zero Server takes registrations and runs with the defaults: here, no certificate
// in the default directory is Run's error naming it, not a panic.
func TestTheZeroServerUsesTheDefaults(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	var srv webhook.Server
	if err := srv.Register("/a", http.NotFoundHandler()); err != nil {
		t.Fatal(err)
	}
	err := srv.Run(context.Background())
	if !errors.Is(err, webhook.ErrCertificate) || !strings.Contains(err.Error(), filepath.Join(webhook.DefaultCertDir(), webhook.DefaultCertName)) {
		t.Errorf("Run = %v; want ErrCertificate naming the default certificate", err)
	}
}
