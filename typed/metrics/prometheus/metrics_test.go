package prometheus

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/shard"
)

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"v": "1"}}
}

// sampleCount returns the number of observations of the histogram series with the given
// labels in what reg gathers, or -1 when there is none.
func sampleCount(t *testing.T, reg prom.Gatherer, name string, labels map[string]string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				return int(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

// value is the expected value of a counter or gauge.
type value struct {
	name      string
	collector prom.Collector
	want      float64
}

// observed is the least number of observations expected of a histogram series.
type observed struct {
	name   string
	labels prom.Labels
	least  int
}

// waitFor waits until every counter and gauge has its value and every histogram has been
// observed enough, as the registry gathers them.
func waitFor(t *testing.T, reg prom.Gatherer, values []value, histograms []observed) {
	t.Helper()
	ok := func() bool {
		for _, v := range values {
			if testutil.ToFloat64(v.collector) != v.want {
				return false
			}
		}
		for _, h := range histograms {
			if sampleCount(t, reg, h.name, h.labels) < h.least {
				return false
			}
		}
		return true
	}
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return ok(), nil })
	if err == nil {
		return
	}
	for _, v := range values {
		if got := testutil.ToFloat64(v.collector); got != v.want {
			t.Errorf("%s = %v, want %v", v.name, got, v.want)
		}
	}
	for _, h := range histograms {
		if got := sampleCount(t, reg, h.name, h.labels); got < h.least {
			t.Errorf("%s%v observed %d times, want at least %d", h.name, h.labels, got, h.least)
		}
	}
	t.FailNow()
}

// TestMetricsOfAControllerAndALoop runs a controller over controller/fake, with a
// handler that panics once and a loop whose reconciles succeed, fail once and fail
// terminally, and checks what the registry gathers.
func TestMetricsOfAControllerAndALoop(t *testing.T) {
	reg := prom.NewPedanticRegistry()
	m := New(Options{ConstLabels: prom.Labels{"program": "test"}})
	reg.MustRegister(m)

	src := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](configMap("ok"), configMap("flaky"), configMap("invalid"))
	src.FailList(1, errors.New("the server is sleeping"))
	c := testctl.New(t, src, controller.Options[*corev1.ConfigMap]{
		Options: reflect.Options[*corev1.ConfigMap]{
			Name:    "configmaps",
			Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 30},
			OnError: func(context.Context, error) {},
		},
		Metrics: m,
	})
	if _, err := c.AddHandler("panicky", controller.HandlerFunc[*corev1.ConfigMap](func(_ context.Context, e event.Event[*corev1.ConfigMap]) {
		if e.Object.Name == "invalid" && e.Type == event.Added {
			panic("cannot handle this one")
		}
	})); err != nil {
		t.Fatal(err)
	}
	var flakyAttempts atomic.Int32
	loop, err := typed.NewLoop(c, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(_ context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			switch req.Name {
			case "flaky":
				if flakyAttempts.Add(1) == 1 {
					return typed.Result{}, errors.New("try again")
				}
			case "invalid":
				return typed.Result{}, typed.Terminal(errors.New("invalid"))
			}
			return typed.Result{}, nil
		}), typed.Options{Name: "mirror", Metrics: m,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(ctx) })
	wg.Go(func() { _ = loop.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	controllerLabels := prom.Labels{"controller": "configmaps"}
	loopLabels := prom.Labels{"loop": "mirror"}
	handlerLabels := prom.Labels{"controller": "configmaps", "handler": "panicky"}
	// The initial state: a failed list, then a list of three; the handler panics on
	// invalid; ok is reconciled, flaky fails and is retried, invalid fails for good.
	waitFor(t, reg, []value{
		{"lists", m.lists.With(controllerLabels), 1},
		{"list items", m.listItems.With(controllerLabels), 3},
		{"list errors", m.errors.With(controllerLabels), 1},
		{"handler panics", m.handlerPanics.With(handlerLabels), 1},
		{"terminal reconcile errors", m.reconcileErrors.WithLabelValues("mirror", "true"), 1},
		{"other reconcile errors", m.reconcileErrors.WithLabelValues("mirror", "false"), 1},
		{"retries", m.retries.With(loopLabels), 1},
	}, []observed{
		{"typedinformer_handler_duration_seconds", handlerLabels, 3},
		{"typedinformer_reconcile_duration_seconds", loopLabels, 4},
		{"typedinformer_reflector_list_duration_seconds", controllerLabels, 1},
	})

	// Live changes through the watch.
	updated := configMap("ok")
	updated.Data["v"] = "2"
	if _, err := src.Update(updated); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Delete("ns", "flaky"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reg, []value{
		{"MODIFIED events", m.watchEvents.WithLabelValues("configmaps", "MODIFIED"), 1},
		{"DELETED events", m.watchEvents.WithLabelValues("configmaps", "DELETED"), 1},
		{"resource version", m.resourceVersion.With(controllerLabels), mustFloat(t, src.ResourceVersion())},
		{"controller queue depth", m.queueDepth.With(controllerLabels), 0},
		{"loop queue depth", m.loopDepth.With(loopLabels), 0},
		{"lists", m.lists.With(controllerLabels), 1},
	}, []observed{
		{"typedinformer_handler_duration_seconds", handlerLabels, 5},
		{"typedinformer_reconcile_duration_seconds", loopLabels, 6},
	})

	// Every series carries the constant label, and the pedantic registry is content.
	families, err := reg.Gather()
	if err != nil {
		t.Errorf("gathering: %v", err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			if !matches(s, map[string]string{"program": "test"}) {
				t.Errorf("%s%v lacks the constant label program=test", f.GetName(), s.GetLabel())
			}
		}
	}
	if n, err := testutil.GatherAndCount(reg, "typedinformer_reflector_lists_total", "typedinformer_reconcile_retries_total"); err != nil || n != 2 {
		t.Errorf("GatherAndCount = %d, %v; want 2 series", n, err)
	}
	lint, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range lint {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestResourceVersionGaugeIgnoresOpaqueVersions(t *testing.T) {
	m := New(Options{})
	m.ResourceVersion("x", "42")
	m.ResourceVersion("x", "not-a-number")
	if got := testutil.ToFloat64(m.resourceVersion.WithLabelValues("x")); got != 42 {
		t.Errorf("resource version gauge = %v, want 42 (the last integer one)", got)
	}
	m.WatchEvent("x", "CUSTOM")
	if got := testutil.ToFloat64(m.watchEvents.WithLabelValues("x", "CUSTOM")); got != 1 {
		t.Errorf("events of an unusual type = %v, want 1", got)
	}
}

func TestTwoControllersWithTheSameNameShareTheirSeries(t *testing.T) {
	m := New(Options{Namespace: "shop"})
	m.ListWatchError("pods")
	m.ListWatchError("pods")
	if got := testutil.ToFloat64(m.errors.WithLabelValues("pods")); got != 2 {
		t.Errorf("errors = %v, want 2", got)
	}
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	if n, err := testutil.GatherAndCount(reg, "shop_reflector_errors_total"); err != nil || n != 1 {
		t.Errorf("GatherAndCount(shop_reflector_errors_total) = %d, %v; want 1", n, err)
	}
}

// TestShardMetricsFollowTheShardsHeld feeds the shard.Metrics calls of a replica that
// gains two shards and gives one up, and checks that the given-up shard's gauges are gone.
func TestShardMetricsFollowTheShardsHeld(t *testing.T) {
	reg := prom.NewPedanticRegistry()
	m := New(Options{})
	reg.MustRegister(m)

	var sm shard.Metrics = m
	for _, i := range []int{3, 7} {
		sm.ShardMoved("pods", i, true)
		sm.ShardObjects("pods", i, 10*i)
		sm.ShardKeys("pods", i, i)
		sm.HandOver("pods", i, 2*time.Second)
	}
	sm.ShardsHeld("pods", 2)
	sm.ShardMoved("pods", 3, false)
	sm.ShardsHeld("pods", 1)

	for _, v := range []value{
		{"shards held", m.shardsHeld.WithLabelValues("pods"), 1},
		{"gained", m.shardMoves.WithLabelValues("pods", "gained"), 2},
		{"lost", m.shardMoves.WithLabelValues("pods", "lost"), 1},
		{"objects of shard 7", m.shardObjects.WithLabelValues("pods", "7"), 70},
		{"keys of shard 7", m.shardKeys.WithLabelValues("pods", "7"), 7},
	} {
		if got := testutil.ToFloat64(v.collector); got != v.want {
			t.Errorf("%s = %v, want %v", v.name, got, v.want)
		}
	}
	if n := testutil.CollectAndCount(m.shardObjects); n != 1 {
		t.Errorf("%d shard object series, want 1: shard 3's is dropped when it is given up", n)
	}
	if n := testutil.CollectAndCount(m.shardKeys); n != 1 {
		t.Errorf("%d shard key series, want 1", n)
	}
	if got := sampleCount(t, reg, "typedinformer_shard_handover_seconds", prom.Labels{"group": "pods"}); got != 2 {
		t.Errorf("hand-overs observed %d times, want 2", got)
	}
	lint, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range lint {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
}
