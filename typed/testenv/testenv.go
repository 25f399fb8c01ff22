//go:build unix

package testenv

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
	"slices"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/typed/crd"
)

// maxPortAttempts is how many times Start picks new ports when a process
// finds its port taken.
const maxPortAttempts = 3

// startTimeout bounds [Start]: starting both processes and installing the CRDs.
const startTimeout = 2 * time.Minute

// Options configure [Start] and [StartContext]. The zero value is ready to use.
type Options struct {
	// BinDir is the directory holding the etcd and kube-apiserver binaries. If
	// empty, they are looked for as [FindBinaries] says: in
	// $TYPEDINFORMER_CONTROLPLANE_BIN, else in the .cache/bin of the typedinformer
	// checkout around the working directory, else in [DefaultBinDir].
	BinDir string
	// Logger receives progress messages. If it has no sink, [Start] logs
	// through the test (t.Log, at verbosity 2) and [StartContext] to
	// klog.Background().
	Logger klog.Logger
	// ExtraAPIServerArgs are appended to the kube-apiserver command line,
	// so they can override the defaults (for flags that take one value,
	// the last one wins).
	//
	// kube-apiserver starts with --feature-gates=ShardedListAndWatch=true,
	// so that it applies the shard selectors package typed/shard sends
	// (ListOptions.ShardSelector, alpha in Kubernetes v1.36) to lists, watches
	// and watch-list streams, and says so in ListMeta.ShardInfo. Repeated
	// --feature-gates flags merge gate by gate, the last value of a gate
	// winning: --feature-gates=ShardedListAndWatch=false here turns it off (the
	// server then ignores shard selectors, without an error, and returns every
	// object), and --feature-gates of other gates leave it on.
	ExtraAPIServerArgs []string
	// CRDs are installed, as [Environment.InstallCRDs] does, before Start
	// returns. The values are not modified.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// CRDPaths name YAML or JSON files of CRDs, or directories of such files,
	// installed after CRDs, as [Environment.InstallCRDFiles] does, before Start
	// returns.
	CRDPaths []string
	// Definitions are CRDs built from Go types, installed after CRDs and CRDPaths,
	// as [Environment.InstallDefinitions] does (with the server's schemas of the
	// Kubernetes types they embed), before Start returns. A Definition that does
	// not build fails Start before the control plane starts.
	Definitions []*crd.Definition
}

// Environment is a running etcd and kube-apiserver on 127.0.0.1, created by
// [Start] or [StartContext]. Its methods are safe for concurrent use. Ports,
// certificates and the etcd data directory stay the same for its whole life,
// across restarts of either process.
type Environment struct {
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

// The goroutines of this package, named as goleak and stack traces name them.
// They run only while some process of some Environment in the test binary runs:
// a goroutine-leak check after every Environment has stopped needs to ignore
// neither, while a check during a test that starts or restarts a process (say,
// right after a controller's Run returned) ignores both with
// goleak.IgnoreAnyFunction.
const (
	// SpawnerFunction is the goroutine that forks etcd and kube-apiserver from
	// a thread that lives as long as they do, which Linux's parent-death
	// signal needs (so that a test binary that dies takes them along).
	SpawnerFunction = "github.com/typedinformer/typedinformer/typed/testenv.spawnLoop"
	// WaiterFunction is the goroutine, one per process, that reaps it.
	WaiterFunction = "github.com/typedinformer/typedinformer/typed/testenv.(*process).wait"
)

// Start starts an Environment for the test, as [StartContext] does, within two
// minutes, installs opts.CRDs and opts.CRDPaths, and registers a t.Cleanup that
// stops it (see [Environment.Stop]), after logging the last lines of both
// process logs if the test failed. It fails the test with t.Fatal if anything
// goes wrong, such as missing binaries (the error says which command builds
// them); it never skips.
//
// Starting takes a few seconds: a test usually starts one Environment and
// shares it between its subtests.
func Start(t testing.TB, opts Options) *Environment {
	t.Helper()
	if opts.Logger.GetSink() == nil {
		opts.Logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	env, err := StartContext(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
				path := filepath.Join(env.dir, name)
				t.Logf("last lines of %s:\n%s", path, readTail(path, 0))
			}
		}
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	return env
}

// StartContext creates a temporary directory, generates a CA, a serving
// certificate and client certificates, starts etcd on free loopback ports,
// waits until it is healthy, starts kube-apiserver on a free loopback port,
// waits until its /readyz answers 200 and the default namespace exists, and
// installs opts.CRDs, opts.CRDPaths and opts.Definitions. It is [Start] for code that has no
// testing.TB, such as TestMain or a demo; call [Environment.Stop] when done.
//
// ctx bounds only the start-up (each wait is also capped at two minutes):
// the processes run until [Environment.Stop]. On error nothing is left
// running and the temporary directory is removed; an error about a process
// includes the tail of its log. If the binaries are missing, the error
// matches [ErrNoBinaries] and names the one command that builds them.
func StartContext(ctx context.Context, opts Options) (*Environment, error) {
	log := opts.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	log = log.WithName("testenv")
	binDir, err := FindBinaries(opts.BinDir)
	if err != nil {
		return nil, err
	}
	// Read the CRD files and build the Definitions before starting anything: a bad file
	// or Definition fails fast.
	for _, d := range opts.Definitions {
		if _, err := d.Build(); err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
	}
	crds := slices.Clone(opts.CRDs)
	if len(opts.CRDPaths) > 0 {
		fromFiles, err := ReadCRDFiles(opts.CRDPaths...)
		if err != nil {
			return nil, err
		}
		crds = append(crds, fromFiles...)
	}
	started := time.Now()
	dir, err := os.MkdirTemp("", "typedinformer-testenv-")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	env := &Environment{
		log:                log.WithValues("dir", dir),
		binDir:             binDir,
		dir:                dir,
		extraAPIServerArgs: slices.Clone(opts.ExtraAPIServerArgs),
		etcdName:           "testenv-" + randomHex(4),
		etcdHTTP:           &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}},
	}
	err = env.start(ctx)
	if err == nil && len(crds) > 0 {
		err = env.InstallCRDs(ctx, crds...)
	}
	if err == nil && len(opts.Definitions) > 0 {
		err = env.InstallDefinitions(ctx, opts.Definitions...)
	}
	if err != nil {
		if stopErr := env.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	env.log.Info("Test environment is ready", "host", env.admin.Host, "etcd", env.EtcdURL(), "crds", len(crds), "duration", time.Since(started).Round(time.Millisecond))
	return env, nil
}

func (env *Environment) start(ctx context.Context) error {
	var err error
	if env.pki, err = newPKI(filepath.Join(env.dir, "pki")); err != nil {
		return fmt.Errorf("testenv: generating certificates: %w", err)
	}
	certPEM, keyPEM, err := env.pki.clientCert("admin", []string{"system:masters"})
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	clientCert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(env.pki.caCert)
	env.apiHTTP = &http.Client{Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12},
	}}

	env.mu.Lock()
	defer env.mu.Unlock()
	for attempt := 1; ; attempt++ {
		ports, err := pickPorts(2)
		if err != nil {
			return err
		}
		env.etcdClientPort, env.etcdPeerPort = ports[0], ports[1]
		p, err := env.startEtcdLocked(ctx)
		if err == nil {
			env.etcd = p
			break
		}
		if p == nil || !p.portInUse() || attempt == maxPortAttempts || ctx.Err() != nil {
			return err
		}
		env.log.Info("etcd found a port taken, retrying with other ports", "attempt", attempt)
	}
	for attempt := 1; ; attempt++ {
		ports, err := pickPorts(1)
		if err != nil {
			return err
		}
		env.apiPort = ports[0]
		env.admin = &rest.Config{
			Host: fmt.Sprintf("https://127.0.0.1:%d", env.apiPort),
			TLSClientConfig: rest.TLSClientConfig{
				CAData:   env.pki.caCertPEM,
				CertData: certPEM,
				KeyData:  keyPEM,
			},
			// The apiserver is private to its user: no client-side
			// throttling.
			QPS: -1,
		}
		p, err := env.startAPIServerLocked(ctx)
		if err == nil {
			env.api = p
			return nil
		}
		if p == nil || !p.portInUse() || attempt == maxPortAttempts || ctx.Err() != nil {
			return err
		}
		env.log.Info("kube-apiserver found its port taken, retrying with another port", "attempt", attempt)
	}
}

// AdminConfig returns a new client configuration for the user "admin" in the
// group system:masters, which may do anything. It authenticates with a client
// certificate, verifies the server against the control plane's CA, and has
// client-side rate limiting turned off (QPS < 0).
func (env *Environment) AdminConfig() *rest.Config {
	return rest.CopyConfig(env.admin)
}

// UserConfig returns a new client configuration like [Environment.AdminConfig]
// but with a freshly issued client certificate for user in groups. Besides the
// RBAC defaults for authenticated users (such as discovery), the user may do
// nothing until the test grants it permissions, with [Environment.Grant] for
// instance; requests it is not allowed are answered 403 Forbidden. Each call
// issues a new certificate; it panics only if the system's random number
// generator fails.
func (env *Environment) UserConfig(user string, groups ...string) *rest.Config {
	certPEM, keyPEM, err := env.pki.clientCert(user, groups)
	if err != nil {
		panic(err)
	}
	config := rest.CopyConfig(env.admin)
	config.CertData, config.KeyData = certPEM, keyPEM
	return config
}

// WriteKubeconfig writes a kubeconfig file for the admin user (see
// [Environment.AdminConfig]) to path, with mode 0600 and the certificates
// embedded, so that kubectl and other clients can use the control plane.
func (env *Environment) WriteKubeconfig(path string) error {
	b64 := base64.StdEncoding.EncodeToString
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: testenv
  context:
    cluster: testenv
    user: admin
current-context: testenv
`, env.admin.Host, b64(env.admin.CAData), b64(env.admin.CertData), b64(env.admin.KeyData))
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		return fmt.Errorf("testenv: writing the kubeconfig: %w", err)
	}
	return nil
}

// BinDir returns the absolute path of the directory the etcd and
// kube-apiserver binaries were found in (see [FindBinaries]).
func (env *Environment) BinDir() string { return env.binDir }

// Dir returns the environment's temporary directory, which holds the etcd
// data, the certificates and the process logs etcd.log and
// kube-apiserver.log. [Environment.Stop] removes it.
func (env *Environment) Dir() string { return env.dir }

// EtcdURL returns the plain-HTTP client URL of etcd, http://127.0.0.1:PORT.
func (env *Environment) EtcdURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d", env.etcdClientPort)
}

// errStopped is returned by the Start methods after Stop.
var errStopped = errors.New("testenv: the control plane has been stopped")

// StopAPIServer stops kube-apiserver: SIGTERM, then SIGKILL if it has not
// exited within 10 seconds (it takes about one), or within one second while
// etcd is stopped (it could not finish its graceful shutdown then). It returns
// once the process has exited. Stopping a stopped apiserver does nothing.
func (env *Environment) StopAPIServer() error {
	env.mu.Lock()
	defer env.mu.Unlock()
	return env.stopAPIServerLocked()
}

func (env *Environment) stopAPIServerLocked() error {
	if env.api == nil {
		return nil
	}
	started := time.Now()
	grace := apiServerGracePeriod
	if env.etcd == nil || env.etcd.exited() {
		grace = apiServerGracePeriodWithoutEtcd
	}
	err := env.api.stop(env.log, grace)
	env.api = nil
	env.log.Info("Stopped kube-apiserver", "duration", time.Since(started).Round(time.Millisecond))
	return err
}

// StartAPIServer starts kube-apiserver again after [Environment.StopAPIServer]
// (or after it crashed), on the same port with the same certificates, and
// waits until it is ready as [Start] does; ctx bounds only that wait. It is an
// error if the apiserver is running, or if etcd is not.
func (env *Environment) StartAPIServer(ctx context.Context) error {
	env.mu.Lock()
	defer env.mu.Unlock()
	return env.startAPIServerAgainLocked(ctx)
}

func (env *Environment) startAPIServerAgainLocked(ctx context.Context) error {
	switch {
	case env.stopped:
		return errStopped
	case env.api != nil && !env.api.exited():
		return errors.New("testenv: kube-apiserver is already running")
	case env.etcd == nil || env.etcd.exited():
		return errors.New("testenv: cannot start kube-apiserver while etcd is stopped")
	}
	started := time.Now()
	env.api = nil
	p, err := env.startAPIServerLocked(ctx)
	if err != nil {
		return err
	}
	env.api = p
	env.log.Info("Started kube-apiserver", "duration", time.Since(started).Round(time.Millisecond))
	return nil
}

// RestartAPIServer is [Environment.StopAPIServer] followed by
// [Environment.StartAPIServer]. The restarted apiserver has an empty watch
// cache, so watches from resource versions that etcd has compacted away fail
// with 410 Gone.
func (env *Environment) RestartAPIServer(ctx context.Context) error {
	env.mu.Lock()
	defer env.mu.Unlock()
	if err := env.stopAPIServerLocked(); err != nil {
		return err
	}
	return env.startAPIServerAgainLocked(ctx)
}

// StopEtcd stops etcd: SIGTERM, then SIGKILL if it has not exited within 2
// seconds, which happens while a running apiserver holds watch streams open
// (etcd would wait 7 s for them); no acknowledged write is lost either way.
// It returns once the process has exited. A running apiserver stays
// up but is not ready until etcd is back. Stopping a stopped etcd does
// nothing.
func (env *Environment) StopEtcd() error {
	env.mu.Lock()
	defer env.mu.Unlock()
	return env.stopEtcdLocked()
}

func (env *Environment) stopEtcdLocked() error {
	if env.etcd == nil {
		return nil
	}
	started := time.Now()
	err := env.etcd.stop(env.log, etcdGracePeriod)
	env.etcd = nil
	env.log.Info("Stopped etcd", "duration", time.Since(started).Round(time.Millisecond))
	return err
}

// StartEtcd starts etcd again after [Environment.StopEtcd] (or after it
// crashed), with the same data directory and ports, and waits until it is
// healthy and, if the apiserver is running, until the apiserver is ready
// again; ctx bounds only these waits. It is an error if etcd is running.
func (env *Environment) StartEtcd(ctx context.Context) error {
	env.mu.Lock()
	defer env.mu.Unlock()
	return env.startEtcdAgainLocked(ctx)
}

func (env *Environment) startEtcdAgainLocked(ctx context.Context) error {
	switch {
	case env.stopped:
		return errStopped
	case env.etcd != nil && !env.etcd.exited():
		return errors.New("testenv: etcd is already running")
	}
	started := time.Now()
	env.etcd = nil
	p, err := env.startEtcdLocked(ctx)
	if err != nil {
		return err
	}
	env.etcd = p
	if env.api != nil && !env.api.exited() {
		if err := env.api.waitUntil(ctx, "ready after etcd started", env.apiServerReady); err != nil {
			return err
		}
	}
	env.log.Info("Started etcd", "duration", time.Since(started).Round(time.Millisecond))
	return nil
}

// RestartEtcd is [Environment.StopEtcd] followed by [Environment.StartEtcd]:
// the data survives, and a running apiserver is ready again when it returns.
func (env *Environment) RestartEtcd(ctx context.Context) error {
	env.mu.Lock()
	defer env.mu.Unlock()
	if err := env.stopEtcdLocked(); err != nil {
		return err
	}
	return env.startEtcdAgainLocked(ctx)
}

// Stop stops kube-apiserver and then etcd, as [Environment.StopAPIServer]
// and [Environment.StopEtcd] do, waits until they have exited and been reaped,
// and removes the temporary directory. When it returns, no process of this
// Environment is left, and if no other Environment runs, no goroutine of this
// package either (the last ones are returning). Afterwards nothing can be
// started again. Calling Stop more than once is safe; later calls do nothing
// and return nil. [Start] registers it as a t.Cleanup.
func (env *Environment) Stop() error {
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.stopped {
		return nil
	}
	env.stopped = true
	started := time.Now()
	errs := []error{env.stopAPIServerLocked(), env.stopEtcdLocked()}
	if err := os.RemoveAll(env.dir); err != nil {
		errs = append(errs, fmt.Errorf("testenv: removing %s: %w", env.dir, err))
	}
	env.log.Info("Stopped the test environment", "duration", time.Since(started).Round(time.Millisecond))
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
			return nil, fmt.Errorf("testenv: finding a free port: %w", err)
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
