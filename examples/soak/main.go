// Command soak churns ConfigMaps against a local control plane (or $KUBECONFIG's cluster)
// for several minutes while a typed controller watches, and reports the heap and the
// goroutine count over time, which must stay flat. It is `make soak`, not part of
// `make test`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

func main() {
	duration := flag.Duration("duration", 3*time.Minute, "how long to churn")
	keys := flag.Int("keys", 500, "how many ConfigMaps the churn cycles through")
	every := flag.Duration("report", 15*time.Second, "how often to report")
	flag.Parse()
	if *every <= 0 || *duration < 3**every || *keys < 1 {
		// Fewer than three readings under churn cannot show a trend.
		fmt.Fprintln(os.Stderr, "soak: -report must be positive, -duration at least 3 times -report, -keys at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *duration, *keys, *every); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// syncTimeout bounds the wait for the initial list: a controller that cannot list
// retries forever.
const syncTimeout = 2 * time.Minute

// sample is one reading of the process.
type sample struct {
	heapMB     float64
	goroutines int
}

func run(ctx context.Context, duration time.Duration, keys int, every time.Duration) (err error) {
	cfg, cleanup, err := cluster(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.QPS, cfg.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "typedinformer-soak-"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer func() {
		// On $KUBECONFIG's cluster the namespace must go whatever happened.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := cs.CoreV1().Namespaces().Delete(dctx, ns.Name, metav1.DeleteOptions{}); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	cms := cs.CoreV1().ConfigMaps(ns.Name)

	c, err := controller.New(cms, controller.Options[*corev1.ConfigMap]{})
	if err != nil {
		return err
	}
	var handled atomic.Int64
	reg, err := c.AddHandler("count", controller.HandlerFunc[*corev1.ConfigMap](func(context.Context, event.Event[*corev1.ConfigMap]) { handled.Add(1) }))
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	stopped := false
	stopController := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	defer func() { err = errors.Join(err, stopController()) }()
	select {
	case <-reg.Synced():
	case <-time.After(syncTimeout):
		return fmt.Errorf("the controller did not sync within %s", syncTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}

	churnCtx, stopChurn := context.WithTimeout(ctx, duration)
	defer stopChurn()
	churned := make(chan int, 1)
	go func() { churned <- churn(churnCtx, cms, keys) }()

	fmt.Printf("%8s %10s %12s %10s %10s %10s\n", "time", "heap MB", "goroutines", "cached", "handled", "backlog")
	start := time.Now()
	var samples []sample
	report := func() {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		s := sample{heapMB: float64(m.HeapInuse) / (1 << 20), goroutines: runtime.NumGoroutine()}
		samples = append(samples, s)
		fmt.Printf("%8s %10.1f %12d %10d %10d %10d\n", time.Since(start).Round(time.Second), s.heapMB,
			s.goroutines, c.Store().Len(), handled.Load(), reg.Pending())
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for churnCtx.Err() == nil {
		select {
		case <-t.C:
			report()
		case <-churnCtx.Done():
		}
	}
	n := <-churned
	report()
	if err := stopController(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Printf("churned %d writes in %s; the controller stopped cleanly\n", n, duration)
	if n == 0 {
		return errors.New("no write succeeded: nothing was soaked")
	}
	return flat(samples)
}

// flat checks that the readings under churn show no growth: the median of the last third
// against the median of the first third, so that one reading taken in the middle of a
// burst (or of a garbage collection) decides nothing. The heap may grow within 2x plus 4
// MB; the goroutines by 3, for HTTP/2 requests in flight when a reading is taken.
func flat(samples []sample) error {
	if len(samples) < 3 {
		return fmt.Errorf("only %d readings: at least 3 are needed to tell a trend", len(samples))
	}
	third := len(samples) / 3
	first, last := samples[:third], samples[len(samples)-third:]
	heap := func(s sample) float64 { return s.heapMB }
	goroutines := func(s sample) float64 { return float64(s.goroutines) }
	heapFirst, heapLast := median(first, heap), median(last, heap)
	gFirst, gLast := median(first, goroutines), median(last, goroutines)
	fmt.Printf("heap median %.1f MB in the first third of the readings, %.1f MB in the last; goroutines %.1f, %.1f\n",
		heapFirst, heapLast, gFirst, gLast)
	if heapLast > 2*heapFirst+4 || gLast > gFirst+3 {
		return errors.New("not flat: the heap may grow within 2x plus 4 MB, the goroutines by 3")
	}
	fmt.Println("flat")
	return nil
}

// median returns the median of f over samples, which must not be empty.
func median(samples []sample, f func(sample) float64) float64 {
	vs := make([]float64, len(samples))
	for i, s := range samples {
		vs[i] = f(s)
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[len(vs)/2]
}

// churn creates, updates and deletes ConfigMaps until ctx ends, returning the writes.
func churn(ctx context.Context, cms interface {
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
	Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}, keys int) int {
	rng := rand.New(rand.NewPCG(7, 11))
	exists := map[string]bool{}
	n := 0
	for ctx.Err() == nil {
		name := "cm-" + strconv.Itoa(rng.IntN(keys))
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": strconv.Itoa(n)}}
		var err error
		switch {
		case !exists[name]:
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			exists[name] = err == nil
		case rng.IntN(5) == 0:
			err = cms.Delete(ctx, name, metav1.DeleteOptions{})
			exists[name] = err != nil
		default:
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err == nil {
			n++
		}
	}
	return n
}

// cluster returns $KUBECONFIG's cluster, or starts a local control plane.
func cluster(ctx context.Context) (*rest.Config, func(), error) {
	if os.Getenv("KUBECONFIG") != "" {
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
		return cfg, func() {}, err
	}
	cp, err := testenv.StartContext(ctx, testenv.Options{})
	if err != nil {
		return nil, nil, err
	}
	return cp.AdminConfig(), func() { _ = cp.Stop() }, nil
}
