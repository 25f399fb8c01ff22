package main_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// freeAddress returns a local address nothing listens on, for the program's flags.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrape returns the metric families /metrics serves at addr.
func scrape(ctx context.Context, addr string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// value sums the samples of family whose labels include want: a counter's or gauge's
// value, a histogram's count.
func value(f *dto.MetricFamily, want map[string]string) float64 {
	sum := 0.0
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if match {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// build builds the main once for the test binary, and returns its path.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "website-operator")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "website-operator")
		// -race: the test binary's packages are built with it already, so this reuses them.
		if out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// A main that cannot start exits 1 at once, saying why.
func TestMainExits1OnABadKubeconfig(t *testing.T) {
	out, err := exec.Command(build(t), "-kubeconfig", "/nonexistent/kubeconfig").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "-kubeconfig /nonexistent/kubeconfig") {
		t.Errorf("the operator with a -kubeconfig that does not exist: %v, saying\n%s\nwant status 1 and the path named", err, out)
	}
}

// The main, built and run as a process against a real control plane with nothing but
// flags and the environment a pod has: it installs its CRD, becomes ready, leads,
// reconciles a Website, serves controller-runtime's metrics for it, and on SIGTERM shuts
// down gracefully, exiting 0 promptly with its Lease released.
func TestMainRunsUntilSIGTERM(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(env.AdminConfig())
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "website-main-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	metrics, probes := freeAddress(t), freeAddress(t)
	cmd := exec.Command(bin, "-kubeconfig", kubeconfig, "-namespace", ns.Name, "-install-crd",
		"-metrics-bind-address", metrics, "-health-probe-bind-address", probes)
	cmd.Env = append(os.Environ(), "POD_NAME=website-0", "POD_NAMESPACE="+ns.Name)
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		for s := bufio.NewScanner(logs); s.Scan(); {
			t.Log(s.Text())
		}
	}()
	go func() {
		<-logged
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	poll := func(what string, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, cond); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	poll("/readyz", func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("the operator exited: %v", err)
		default:
		}
		resp, err := http.Get("http://" + probes + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	websites := client.FromDynamicNamespaced[*website.Website](dynamic.NewForConfigOrDie(env.AdminConfig()).Resource(website.Resource))(ns.Name)
	if _, err := websites.Create(ctx, &website.Website{
		TypeMeta:   metav1.TypeMeta{APIVersion: website.Kind.GroupVersion().String(), Kind: website.Kind.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Spec: website.WebsiteSpec{Message: "hello", Replicas: 1},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("the Website reconciled", func(ctx context.Context) (bool, error) {
		w, err := websites.Get(ctx, "hello", metav1.GetOptions{})
		return err == nil && w.Status.ObservedGeneration == w.Generation, nil
	})

	lease, err := cs.CoordinationV1().Leases(ns.Name).Get(ctx, website.Component, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); !strings.HasPrefix(holder, "website-0_") {
		t.Errorf("the Lease is held by %q, want website-0_ and a unique suffix", holder)
	}
	var missing []string
	poll("controller-runtime's metrics", func(ctx context.Context) (bool, error) {
		families, err := scrape(ctx, metrics)
		if err != nil {
			return false, err
		}
		missing = nil
		for _, w := range []struct {
			name   string
			labels map[string]string
		}{
			{"controller_runtime_reconcile_total", map[string]string{"result": "success"}},
			{"controller_runtime_reconcile_time_seconds", nil},
			{"controller_runtime_max_concurrent_reconciles", nil},
			{"workqueue_adds_total", nil},
			{"workqueue_work_duration_seconds", nil},
			{"rest_client_requests_total", nil},
			{"leader_election_master_status", map[string]string{"name": website.Component}},
		} {
			if value(families[w.name], w.labels) == 0 {
				missing = append(missing, fmt.Sprintf("%s%v", w.name, w.labels))
			}
		}
		return len(missing) == 0, nil
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM the operator exited with %v, want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the operator did not exit within 30s of SIGTERM")
	}
	lease, err = cs.CoordinationV1().Leases(ns.Name).Get(ctx, website.Component, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "" {
		t.Errorf("after SIGTERM the Lease is still held by %q", holder)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the test ran out of time")
	}
}
