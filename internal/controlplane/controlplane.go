//go:build unix

package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// maxPortAttempts is how many times Start picks new ports when a process
// finds its port taken.
const maxPortAttempts = 3

// Options configure [Start]. The zero value is ready to use.
type Options struct {
	// BinDir is the directory holding the etcd and kube-apiserver binaries.
	// If empty, $TYPEDINFORMER_CONTROLPLANE_BIN is used, else .cache/bin
	// in the root of the github.com/typedinformer/typedinformer module,
	// found by walking up from the working directory.
	BinDir string
	// Logger receives progress messages. If it has no sink,
	// klog.Background() is used.
	Logger klog.Logger
	// ExtraAPIServerArgs are appended to the kube-apiserver command line,
	// so they can override the defaults (for flags that take one value,
	// the last one wins).
	ExtraAPIServerArgs []string
}

// ControlPlane is a running etcd and kube-apiserver on 127.0.0.1, created by
// [Start]. Its methods are safe for concurrent use. Ports, certificates and
// the etcd data directory stay the same for its whole life, across restarts
// of either process.
type ControlPlane struct {
	log                klog.Logger
	binDir             string
	dir                string
	extraAPIServerArgs []string
	pki                *pki
	admin              *rest.Config
	apiHTTP, etcdHTTP  *http.Client

	etcdName                     string
	etcdClientPort, etcdPeerPort int
	apiPort                      int

	mu      sync.Mutex
	etcd    *process // nil when not started
	api     *process // nil when not started
	stopped bool
}

// SpawnerFunction names the goroutine that starts the processes, which on Linux lives as
// long as the process by design (see startCommand in spawn_linux.go): the goroutine-leak
// checks of tests that start a control plane ignore it by this name.
const SpawnerFunction = "github.com/typedinformer/typedinformer/internal/controlplane.startCommand.func1.1"

// Start creates a temporary directory, generates a CA, a serving certificate
// and client certificates, starts etcd on free loopback ports, waits until it
// is healthy, starts kube-apiserver on a free loopback port and waits until
// its /readyz answers 200 and the default namespace exists.
//
// ctx bounds only the start-up (each wait is also capped at two minutes):
// the processes run until [ControlPlane.Stop]. On error nothing is left
// running and the temporary directory is removed; an error about a process
// includes the tail of its log. If the binaries are missing, the error says
// to run `make controlplane`.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	log := opts.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	log = log.WithName("controlplane")
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	dir, err := os.MkdirTemp("", "typedinformer-controlplane-")
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	cp := &ControlPlane{
		log:                log.WithValues("dir", dir),
		binDir:             binDir,
		dir:                dir,
		extraAPIServerArgs: append([]string(nil), opts.ExtraAPIServerArgs...),
		etcdName:           "controlplane-" + randomHex(4),
		etcdHTTP:           &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}},
	}
	if err := cp.start(ctx); err != nil {
		if stopErr := cp.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	cp.log.Info("Control plane is ready", "host", cp.admin.Host, "etcd", cp.EtcdURL(), "duration", time.Since(started).Round(time.Millisecond))
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context) error {
	var err error
	if cp.pki, err = newPKI(filepath.Join(cp.dir, "pki")); err != nil {
		return fmt.Errorf("controlplane: generating certificates: %w", err)
	}
	certPEM, keyPEM, err := cp.pki.clientCert("admin", []string{"system:masters"})
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	clientCert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cp.pki.caCert)
	cp.apiHTTP = &http.Client{Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12},
	}}

	cp.mu.Lock()
	defer cp.mu.Unlock()
	for attempt := 1; ; attempt++ {
		ports, err := pickPorts(2)
		if err != nil {
			return err
		}
		cp.etcdClientPort, cp.etcdPeerPort = ports[0], ports[1]
		p, err := cp.startEtcdLocked(ctx)
		if err == nil {
			cp.etcd = p
			break
		}
		if p == nil || !p.portInUse() || attempt == maxPortAttempts || ctx.Err() != nil {
			return err
		}
		cp.log.Info("etcd found a port taken, retrying with other ports", "attempt", attempt)
	}
	for attempt := 1; ; attempt++ {
		ports, err := pickPorts(1)
		if err != nil {
			return err
		}
		cp.apiPort = ports[0]
		cp.admin = &rest.Config{
			Host: fmt.Sprintf("https://127.0.0.1:%d", cp.apiPort),
			TLSClientConfig: rest.TLSClientConfig{
				CAData:   cp.pki.caCertPEM,
				CertData: certPEM,
				KeyData:  keyPEM,
			},
			// The apiserver is private to its user: no client-side
			// throttling.
			QPS: -1,
		}
		p, err := cp.startAPIServerLocked(ctx)
		if err == nil {
			cp.api = p
			return nil
		}
		if p == nil || !p.portInUse() || attempt == maxPortAttempts || ctx.Err() != nil {
			return err
		}
		cp.log.Info("kube-apiserver found its port taken, retrying with another port", "attempt", attempt)
	}
}

// StartForTest is [Start] with default options and a two-minute timeout, for
// tests: it logs through t, fails the test with t.Fatal if the control plane
// cannot start (it never skips), and registers a t.Cleanup that stops it and
// removes its directory, after logging the tails of both process logs if the
// test failed.
func StartForTest(t testing.TB) *ControlPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{Logger: ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
				path := filepath.Join(cp.dir, name)
				t.Logf("last lines of %s:\n%s", path, readTail(path, 0))
			}
		}
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	return cp
}

// AdminConfig returns a new client configuration for the user "admin" in the
// group system:masters, which may do anything. It authenticates with a client
// certificate, verifies the server against the control plane's CA, and has
// client-side rate limiting turned off (QPS < 0).
func (cp *ControlPlane) AdminConfig() *rest.Config {
	return rest.CopyConfig(cp.admin)
}

// UserConfig returns a new client configuration like [ControlPlane.AdminConfig]
// but with a freshly issued client certificate for user in groups. Besides the
// RBAC defaults for authenticated users (such as discovery), the user may do
// nothing until the test grants it roles. Each call issues a new certificate;
// it panics only if the system's random number generator fails.
func (cp *ControlPlane) UserConfig(user string, groups ...string) *rest.Config {
	certPEM, keyPEM, err := cp.pki.clientCert(user, groups)
	if err != nil {
		panic(err)
	}
	config := rest.CopyConfig(cp.admin)
	config.CertData, config.KeyData = certPEM, keyPEM
	return config
}

// WriteKubeconfig writes a kubeconfig file for the admin user (see
// [ControlPlane.AdminConfig]) to path, with mode 0600 and the certificates
// embedded, so that kubectl and other clients can use the control plane.
func (cp *ControlPlane) WriteKubeconfig(path string) error {
	b64 := base64.StdEncoding.EncodeToString
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: controlplane
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: controlplane
  context:
    cluster: controlplane
    user: admin
current-context: controlplane
`, cp.admin.Host, b64(cp.admin.CAData), b64(cp.admin.CertData), b64(cp.admin.KeyData))
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		return fmt.Errorf("controlplane: writing the kubeconfig: %w", err)
	}
	return nil
}

// Dir returns the control plane's temporary directory, which holds the etcd
// data, the certificates and the process logs etcd.log and
// kube-apiserver.log. [ControlPlane.Stop] removes it.
func (cp *ControlPlane) Dir() string { return cp.dir }

// EtcdURL returns the plain-HTTP client URL of etcd, http://127.0.0.1:PORT.
func (cp *ControlPlane) EtcdURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d", cp.etcdClientPort)
}

// errStopped is returned by the Start methods after Stop.
var errStopped = errors.New("controlplane: the control plane has been stopped")

// StopAPIServer stops kube-apiserver: SIGTERM, then SIGKILL if it has not
// exited within 10 seconds (it takes about one), or within one second while
// etcd is stopped (it could not finish its graceful shutdown then). It returns
// once the process has exited. Stopping a stopped apiserver does nothing.
func (cp *ControlPlane) StopAPIServer() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.stopAPIServerLocked()
}

func (cp *ControlPlane) stopAPIServerLocked() error {
	if cp.api == nil {
		return nil
	}
	started := time.Now()
	grace := apiServerGracePeriod
	if cp.etcd == nil || cp.etcd.exited() {
		grace = apiServerGracePeriodWithoutEtcd
	}
	err := cp.api.stop(cp.log, grace)
	cp.api = nil
	cp.log.Info("Stopped kube-apiserver", "duration", time.Since(started).Round(time.Millisecond))
	return err
}

// StartAPIServer starts kube-apiserver again after [ControlPlane.StopAPIServer]
// (or after it crashed), on the same port with the same certificates, and
// waits until it is ready as [Start] does; ctx bounds only that wait. It is an
// error if the apiserver is running, or if etcd is not.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.startAPIServerAgainLocked(ctx)
}

func (cp *ControlPlane) startAPIServerAgainLocked(ctx context.Context) error {
	switch {
	case cp.stopped:
		return errStopped
	case cp.api != nil && !cp.api.exited():
		return errors.New("controlplane: kube-apiserver is already running")
	case cp.etcd == nil || cp.etcd.exited():
		return errors.New("controlplane: cannot start kube-apiserver while etcd is stopped")
	}
	started := time.Now()
	cp.api = nil
	p, err := cp.startAPIServerLocked(ctx)
	if err != nil {
		return err
	}
	cp.api = p
	cp.log.Info("Started kube-apiserver", "duration", time.Since(started).Round(time.Millisecond))
	return nil
}

// RestartAPIServer is [ControlPlane.StopAPIServer] followed by
// [ControlPlane.StartAPIServer]. The restarted apiserver has an empty watch
// cache, so watches from resource versions that etcd has compacted away fail
// with 410 Gone.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err := cp.stopAPIServerLocked(); err != nil {
		return err
	}
	return cp.startAPIServerAgainLocked(ctx)
}

// StopEtcd stops etcd: SIGTERM, then SIGKILL if it has not exited within 2
// seconds, which happens while a running apiserver holds watch streams open
// (etcd would wait 7 s for them); no acknowledged write is lost either way.
// It returns once the process has exited. A running apiserver stays
// up but is not ready until etcd is back. Stopping a stopped etcd does
// nothing.
func (cp *ControlPlane) StopEtcd() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.stopEtcdLocked()
}

func (cp *ControlPlane) stopEtcdLocked() error {
	if cp.etcd == nil {
		return nil
	}
	started := time.Now()
	err := cp.etcd.stop(cp.log, etcdGracePeriod)
	cp.etcd = nil
	cp.log.Info("Stopped etcd", "duration", time.Since(started).Round(time.Millisecond))
	return err
}

// StartEtcd starts etcd again after [ControlPlane.StopEtcd] (or after it
// crashed), with the same data directory and ports, and waits until it is
// healthy and, if the apiserver is running, until the apiserver is ready
// again; ctx bounds only these waits. It is an error if etcd is running.
func (cp *ControlPlane) StartEtcd(ctx context.Context) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.startEtcdAgainLocked(ctx)
}

func (cp *ControlPlane) startEtcdAgainLocked(ctx context.Context) error {
	switch {
	case cp.stopped:
		return errStopped
	case cp.etcd != nil && !cp.etcd.exited():
		return errors.New("controlplane: etcd is already running")
	}
	started := time.Now()
	cp.etcd = nil
	p, err := cp.startEtcdLocked(ctx)
	if err != nil {
		return err
	}
	cp.etcd = p
	if cp.api != nil && !cp.api.exited() {
		if err := cp.api.waitUntil(ctx, "ready after etcd started", cp.apiServerReady); err != nil {
			return err
		}
	}
	cp.log.Info("Started etcd", "duration", time.Since(started).Round(time.Millisecond))
	return nil
}

// RestartEtcd is [ControlPlane.StopEtcd] followed by [ControlPlane.StartEtcd]:
// the data survives, and a running apiserver is ready again when it returns.
func (cp *ControlPlane) RestartEtcd(ctx context.Context) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err := cp.stopEtcdLocked(); err != nil {
		return err
	}
	return cp.startEtcdAgainLocked(ctx)
}

// Stop stops kube-apiserver and then etcd, as [ControlPlane.StopAPIServer]
// and [ControlPlane.StopEtcd] do, waits until they have exited, and removes the temporary
// directory. Afterwards nothing can be started again. Calling Stop more than
// once is safe; later calls do nothing and return nil.
func (cp *ControlPlane) Stop() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.stopped {
		return nil
	}
	cp.stopped = true
	started := time.Now()
	errs := []error{cp.stopAPIServerLocked(), cp.stopEtcdLocked()}
	if err := os.RemoveAll(cp.dir); err != nil {
		errs = append(errs, fmt.Errorf("controlplane: removing %s: %w", cp.dir, err))
	}
	cp.log.Info("Stopped control plane", "duration", time.Since(started).Round(time.Millisecond))
	return errors.Join(errs...)
}

// pickPorts is freePorts, replaced in tests.
var pickPorts = freePorts

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago. Another process may take one before we use it; Start retries then.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("controlplane: finding a free port: %w", err)
		}
		defer l.Close() // keep all open until all are picked, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
