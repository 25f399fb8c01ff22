package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"github.com/typedinformer/typedinformer/typed/testenv"
)

const (
	// controlPlaneObjects is how many ConfigMaps BenchmarkControlPlaneSync syncs.
	controlPlaneObjects = 10_000
	// controlPlaneNamespace holds them, and nothing else.
	controlPlaneNamespace = "bench-sync"
	// createWorkers is how many ConfigMaps are created at once.
	createWorkers = 64
)

// benchControlPlaneSync times lib's syncs from the control plane cfg points to, over
// connections of its own.
func benchControlPlaneSync(b *testing.B, lib library, cfg *rest.Config) {
	cfg, closeAll := ownConnections(cfg)
	defer checkLeaks(b, closeAll)()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	cms := client.CoreV1().ConfigMaps(controlPlaneNamespace)
	benchSync(b, lib, func() configMapLW { return cms }, controlPlaneObjects)
}

// shared is the control plane of the test binary, started by the first benchmark that
// needs one and stopped by TestMain.
var shared struct {
	once sync.Once
	cp   *testenv.Environment
	cfg  *rest.Config
	skip string
	err  error

	// syncOnce creates the ConfigMaps of BenchmarkControlPlaneSync on its first run.
	syncOnce sync.Once
	syncErr  error
}

// startControlPlane returns the admin configuration of the shared control plane, with
// the client rate limit raised (QPS 1000, burst 2000), starting it on first use. It
// skips b if the binaries are missing.
func startControlPlane(b *testing.B) *rest.Config {
	b.Helper()
	shared.once.Do(func() {
		if err := controlPlaneBinaries(); err != nil {
			shared.skip = err.Error() + "; run `make controlplane` (`make bench` does)"
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		shared.cp, shared.err = testenv.StartContext(ctx, testenv.Options{})
		if shared.err != nil {
			return
		}
		shared.cfg = shared.cp.AdminConfig()
		shared.cfg.QPS, shared.cfg.Burst = 1000, 2000
		b.Logf("control plane started in %v", time.Since(start).Round(time.Millisecond))
	})
	switch {
	case shared.skip != "":
		b.Skip(shared.skip)
	case shared.err != nil:
		b.Fatal(shared.err)
	}
	return rest.CopyConfig(shared.cfg)
}

// sharedControlPlane is startControlPlane, having created the ConfigMaps of
// BenchmarkControlPlaneSync on first use.
func sharedControlPlane(b *testing.B) *rest.Config {
	b.Helper()
	cfg := startControlPlane(b)
	shared.syncOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		shared.syncErr = createConfigMaps(ctx, cfg, controlPlaneNamespace, controlPlaneObjects)
		b.Logf("%d ConfigMaps created in %v", controlPlaneObjects, time.Since(start).Round(time.Millisecond))
	})
	if shared.syncErr != nil {
		b.Fatal(shared.syncErr)
	}
	return cfg
}

// stopControlPlane stops the shared control plane, if one was started.
func stopControlPlane() {
	if shared.cp != nil {
		if err := shared.cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
}

// createConfigMaps creates namespace and n ConfigMaps in it, cm-00000 and on,
// createWorkers at a time, and checks that the namespace holds exactly n of them.
func createConfigMaps(ctx context.Context, cfg *rest.Config, namespace string, n int) error {
	cfg, closeAll := ownConnections(cfg)
	defer closeAll()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	cms := client.CoreV1().ConfigMaps(namespace)
	next := make(chan int)
	errs := make(chan error, createWorkers)
	var wg sync.WaitGroup
	for range createWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{
						Name:   fmt.Sprintf("cm-%05d", i),
						Labels: map[string]string{"app.kubernetes.io/name": "bench"},
					},
					Data: map[string]string{"config.yaml": fmt.Sprintf("key: value-%d", i)},
				}
				if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("creating ConfigMap %s: %w", cm.Name, err)
					return
				}
			}
		}()
	}
	var createErr error
feed:
	for i := range n {
		select {
		case next <- i:
		case createErr = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if createErr != nil {
		return createErr
	}
	for err := range errs {
		return err
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the ConfigMaps: %w", err)
	}
	// Every namespace also gets a kube-root-ca.crt ConfigMap once the controller manager
	// runs; this control plane has none, so the namespace holds only ours.
	if len(list.Items) != n {
		return fmt.Errorf("namespace %s holds %d ConfigMaps, want %d", namespace, len(list.Items), n)
	}
	return nil
}

// ownConnections returns a copy of cfg whose clients dial their own connections, and a
// function that closes them all. client-go otherwise shares one transport per TLS
// configuration for the life of the process, and the HTTP/2 connections of that
// transport keep a reader goroutine each even after CloseIdleConnections; closing the
// connections is what ends them, so that no goroutine outlives its benchmark.
func ownConnections(cfg *rest.Config) (*rest.Config, func()) {
	cfg = rest.CopyConfig(cfg)
	d := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Dial = d.DialContext // a config with its own Dial gets its own transport
	return cfg, d.CloseAll
}

// controlPlaneBinaries checks that etcd and kube-apiserver are where
// typed/testenv looks for them: $TYPEDINFORMER_CONTROLPLANE_BIN, else .cache/bin
// at the root of the module. (controlplane.Start reports missing binaries as an error like
// any other; the benchmark must tell them apart to skip rather than fail.)
func controlPlaneBinaries() error {
	dir := os.Getenv(testenv.EnvBinDir)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		dir = filepath.Join(root, ".cache", "bin")
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("no control plane binaries: %w", err)
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("no control plane binaries: %s is not executable", filepath.Join(dir, name))
		}
	}
	return nil
}

// moduleRoot walks up from the working directory to the directory of this module's go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRootModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no control plane binaries: cannot find the module root")
		}
		dir = parent
	}
}

// isRootModule reports whether the go.mod file at path declares this module.
func isRootModule(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], "\"`") == "github.com/typedinformer/typedinformer"
		}
	}
	return false
}
