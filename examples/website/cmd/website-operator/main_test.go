package main_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/internal/testsupport/mainproc"
	"github.com/typedinformer/typedinformer/typed/client"
)

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

// operator is this package's main.
var operator mainproc.Binary

func TestMain(m *testing.M) {
	code := m.Run()
	operator.Remove()
	os.Exit(code)
}

// A main that cannot start exits 1 at once, saying why.
func TestMainExits1OnABadKubeconfig(t *testing.T) {
	out, err := exec.Command(operator.Path(t), "-kubeconfig", "/nonexistent/kubeconfig").CombinedOutput()
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := mainproc.StartOperator(ctx, t, &operator, "website-0", "-install-crd")
	websites := client.FromDynamicNamespaced[*website.Website](dynamic.NewForConfigOrDie(o.Env.AdminConfig()).Resource(website.Resource))(o.Namespace)
	if _, err := websites.Create(ctx, &website.Website{
		TypeMeta:   metav1.TypeMeta{APIVersion: website.Kind.GroupVersion().String(), Kind: website.Kind.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Spec: website.WebsiteSpec{Message: "hello", Replicas: 1},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mainproc.Poll(ctx, t, "the Website reconciled", func(ctx context.Context) (bool, error) {
		w, err := websites.Get(ctx, "hello", metav1.GetOptions{})
		return err == nil && w.Status.ObservedGeneration == w.Generation, nil
	})

	o.CheckLeads(ctx, t, website.Component)
	var missing []string
	mainproc.Poll(ctx, t, "controller-runtime's metrics", func(ctx context.Context) (bool, error) {
		families, err := scrape(ctx, o.Metrics)
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

	o.CheckGracefulStop(ctx, t, website.Component)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the test ran out of time")
	}
}
