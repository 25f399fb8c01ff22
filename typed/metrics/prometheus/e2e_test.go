//go:build unix

package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/manager"
	typedprom "github.com/typedinformer/typedinformer/typed/metrics/prometheus"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// scrapeMetrics GETs /metrics from addr with token (none when empty); it returns the
// status code and, for a 200, the parsed metric families.
func scrapeMetrics(t *testing.T, addr, token string) (int, map[string]*familyValues) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*familyValues{}
	for name, f := range families {
		fv := &familyValues{}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			fv.series = append(fv.series, series{labels, v})
		}
		out[name] = fv
	}
	return resp.StatusCode, out
}

type series struct {
	labels map[string]string
	value  float64 // a counter's or gauge's value, a histogram's count
}

type familyValues struct{ series []series }

// value returns the value of the series whose labels include want, summed, and whether
// there is one.
func (f *familyValues) value(want map[string]string) (float64, bool) {
	if f == nil {
		return 0, false
	}
	sum, found := 0.0, false
	for _, s := range f.series {
		match := true
		for k, v := range want {
			if s.labels[k] != v {
				match = false
			}
		}
		if match {
			sum, found = sum+s.value, true
		}
	}
	return sum, found
}

// serviceAccountToken creates the service account name in ns and returns a token of it.
func serviceAccountToken(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// TestManagerServesControllerRuntimeMetrics runs a Manager with leader election and a
// loop on a real kube-apiserver, whose reconciles succeed, fail once and ask to be
// requeued once, and scrapes /metrics over HTTP, with the API server's authentication
// and authorization on: every name a controller-runtime dashboard reads is there with
// its labels and a non-zero value where reconciles make one (the gauges of work in
// progress, active workers, queue depth and unfinished work, while reconciles wait);
// a scrape without a token
// is refused (401), a service account not granted GET /metrics is refused (403), one
// granted it is served.
func TestManagerServesControllerRuntimeMetrics(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pm := typedprom.New(typedprom.Options{}) // before the clients: client-go's hooks count their requests
	cs, err := kubernetes.NewForConfig(env.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	const ns = "metrics-e2e"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ok", "fails-once", "requeued-once"} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	allowed := serviceAccountToken(ctx, t, cs, ns, "prometheus")
	restricted := serviceAccountToken(ctx, t, cs, ns, "nobody")
	if err := env.Grant(ctx, "", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"},
		rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}); err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	m := manager.New(manager.Options{
		Metrics: pm, MetricsListener: l, MetricsHandler: pm.Handler(), MetricsAuth: cs,
		LeaderElection: &leaderelection.Config{Client: cs.CoordinationV1(), Namespace: ns, Name: "metrics-e2e", Identity: "a",
			LeaseDuration: 15 * time.Second},
	})
	var mu sync.Mutex
	attempts := map[string]int{}
	release := make(chan struct{}) // the reconciles of "slow-" ConfigMaps wait for it
	var releaseOnce sync.Once
	releaseSlow := func() { releaseOnce.Do(func() { close(release) }) }
	_, err = manager.For(m, manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps), manager.CacheOptions[*corev1.ConfigMap]{Namespaces: []string{ns}}).
		WithOptions(typed.Options{Name: "configmaps", Workers: 2}).
		Complete(typed.ReconcilerFunc[*corev1.ConfigMap](func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if strings.HasPrefix(req.Name, "slow-") {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			mu.Lock()
			attempts[req.Name]++
			n := attempts[req.Name]
			mu.Unlock()
			switch {
			case req.Name == "fails-once" && n == 1:
				return typed.Result{}, errors.New("try again")
			case req.Name == "requeued-once" && n == 1:
				return typed.Result{RequeueAfter: 10 * time.Millisecond}, nil
			}
			return typed.Result{}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	defer func() {
		releaseSlow()
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()

	loop := map[string]string{"controller": "configmaps"}
	queue := map[string]string{"name": "configmaps", "controller": "configmaps"}
	// Every name, with its labels, and whether a reconcile makes it non-zero.
	want := []struct {
		name    string
		labels  map[string]string
		nonZero bool
	}{
		{"controller_runtime_reconcile_total", map[string]string{"controller": "configmaps", "result": "success"}, true},
		{"controller_runtime_reconcile_total", map[string]string{"controller": "configmaps", "result": "error"}, true},
		{"controller_runtime_reconcile_total", map[string]string{"controller": "configmaps", "result": "requeue_after"}, true},
		{"controller_runtime_reconcile_total", map[string]string{"controller": "configmaps", "result": "requeue"}, false},
		{"controller_runtime_reconcile_errors_total", loop, true},
		{"controller_runtime_reconcile_time_seconds", loop, true},
		{"controller_runtime_active_workers", loop, false},
		{"controller_runtime_max_concurrent_reconciles", loop, true},
		{"workqueue_depth", queue, false},
		{"workqueue_adds_total", queue, true},
		{"workqueue_queue_duration_seconds", queue, true},
		{"workqueue_work_duration_seconds", queue, true},
		{"workqueue_retries_total", queue, true},
		{"workqueue_unfinished_work_seconds", queue, false},
		{"workqueue_longest_running_processor_seconds", queue, false},
		{"rest_client_requests_total", map[string]string{"code": "200", "method": "GET"}, true},
		{"leader_election_master_status", map[string]string{"name": "metrics-e2e"}, true},
		{"typedinformer_reflector_lists_total", nil, true},
		{"typedinformer_reflector_watch_events_total", nil, false},
		{"typedinformer_reconcile_duration_seconds", map[string]string{"loop": "configmaps"}, true},
		{"go_goroutines", nil, true},
	}
	var missing, last []string
	touched := 0
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, families := scrapeMetrics(t, addr, allowed)
		if code != http.StatusOK {
			missing = []string{"a scrape answered " + http.StatusText(code)}
			return false, nil
		}
		missing = nil
		if _, ok := families["typedinformer_reflector_watch_events_total"].value(nil); !ok {
			// A change, for a watch event (the list, not the watch, brought the others).
			touched++
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "touched-" + strconv.Itoa(touched)}}
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return false, err
			}
		}
		for _, w := range want {
			v, ok := families[w.name].value(w.labels)
			switch {
			case !ok:
				missing = append(missing, w.name+" (absent)")
			case w.nonZero && v == 0:
				missing = append(missing, w.name+" (zero)")
			}
		}
		if len(missing) > 0 && !slices.Equal(missing, last) {
			t.Logf("waiting for: %s", strings.Join(missing, ", "))
			last = missing
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("after reconciles, /metrics lacks: %s", strings.Join(missing, ", "))
	}

	for _, c := range []struct {
		who, token string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a made-up token", "not-a-token", http.StatusUnauthorized},
		{"a service account not granted GET /metrics", restricted, http.StatusForbidden},
		{"a service account granted GET /metrics", allowed, http.StatusOK},
	} {
		if code, _ := scrapeMetrics(t, addr, c.token); code != c.want {
			t.Errorf("a scrape by %s = %d, want %d", c.who, code, c.want)
		}
	}

	// The gauges of work in progress: three reconciles that wait, for two workers, keep
	// both workers busy and one key queued until they are released.
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "slow-" + strconv.Itoa(i)}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	busy := []struct {
		name   string
		labels map[string]string
		want   float64 // at least
	}{
		{"controller_runtime_active_workers", loop, 2},
		{"workqueue_depth", queue, 1},
		{"workqueue_unfinished_work_seconds", queue, 0.001},
		{"workqueue_longest_running_processor_seconds", queue, 0.001},
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, families := scrapeMetrics(t, addr, allowed)
		missing = nil
		for _, b := range busy {
			if v, _ := families[b.name].value(b.labels); v < b.want {
				missing = append(missing, fmt.Sprintf("%s = %v (want at least %v)", b.name, v, b.want))
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Errorf("while reconciles wait: %s", strings.Join(missing, ", "))
	}
	releaseSlow()
}
