package prometheus_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	typedprom "github.com/typedinformer/typedinformer/typed/metrics/prometheus"
)

// A controller and its reconcile loop report to one set of metrics, registered once. A
// program would serve the registry with promhttp.HandlerFor(registry,
// promhttp.HandlerOpts{}); here the example reads it back with testutil.
func Example() {
	registry := prom.NewRegistry()
	metrics := typedprom.New(typedprom.Options{})
	registry.MustRegister(metrics)

	// Any ListerWatcher will do: clientset.CoreV1().ConfigMaps(ns) in a program.
	source := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "one"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "two"}},
	)
	configMaps, err := controller.New(source, controller.Options[*corev1.ConfigMap]{
		Options: reflect.Options[*corev1.ConfigMap]{Name: "configmaps"},
		Metrics: metrics, // one sink for every controller and loop: each call names its own
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var mu sync.Mutex
	reconciled := 0
	loop, err := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(context.Context, typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			reconciled++
			return typed.Result{}, nil
		}), typed.Options{Name: "demo", Metrics: metrics})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = typed.RunAll(ctx, configMaps.Run, loop.Run) })
	_ = wait.PollUntilContextCancel(ctx, time.Millisecond, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return reconciled == 2, nil
	})
	cancel()
	wg.Wait()

	fmt.Println("items listed:", value(registry, "typedinformer_reflector_list_items"))
	fmt.Println("reconciles timed:", value(registry, "typedinformer_reconcile_duration_seconds"))
	problems, _ := testutil.GatherAndLint(registry)
	fmt.Println("lint problems:", len(problems))
	// Output:
	// items listed: 2
	// reconciles timed: 2
	// lint problems: 0
}

// value returns the value of the first series of the named metric the registry gathers:
// a counter's or gauge's value, or a histogram's number of observations.
func value(registry prom.Gatherer, name string) float64 {
	families, err := registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != name || len(f.GetMetric()) == 0 {
			continue
		}
		m := f.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}
