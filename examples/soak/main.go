// Command soak churns ConfigMaps against a local control plane (or $KUBECONFIG's cluster)
// for several minutes while a typed controller watches, and reports the heap and the
// goroutine count over time, which must stay flat. It is `make soak`, not part of
// `make test`.
package main

import (
	"context"
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
	"github.com/typedinformer/typedinformer/internal/controlplane"
)

func main() {
	duration := flag.Duration("duration", 3*time.Minute, "how long to churn")
	keys := flag.Int("keys", 500, "how many ConfigMaps the churn cycles through")
	every := flag.Duration("report", 15*time.Second, "how often to report")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *duration, *keys, *every); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, duration time.Duration, keys int, every time.Duration) error {
	cfg, cleanup, err := cluster(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.QPS, cfg.Burst = 500, 1000
	cs := kubernetes.NewForConfigOrDie(cfg)
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "typedinformer-soak-"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	cms := cs.CoreV1().ConfigMaps(ns.Name)

	c := controller.New[*corev1.ConfigMap, *corev1.ConfigMapList](cms)
	var handled atomic.Int64
	reg, err := c.AddHandler("count", controller.HandlerFunc[*corev1.ConfigMap](func(context.Context, event.Event[*corev1.ConfigMap]) { handled.Add(1) }))
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	<-reg.Synced()

	churnCtx, stopChurn := context.WithTimeout(ctx, duration)
	defer stopChurn()
	churned := make(chan int, 1)
	go func() { churned <- churn(churnCtx, cms, keys) }()

	fmt.Printf("%8s %10s %12s %10s %10s %10s\n", "time", "heap MB", "goroutines", "cached", "handled", "backlog")
	start := time.Now()
	var heaps []float64
	var goroutines []int
	report := func() {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		heaps, goroutines = append(heaps, float64(m.HeapInuse)/(1<<20)), append(goroutines, runtime.NumGoroutine())
		fmt.Printf("%8s %10.1f %12d %10d %10d %10d\n", time.Since(start).Round(time.Second), float64(m.HeapInuse)/(1<<20),
			runtime.NumGoroutine(), c.Store().Len(), handled.Load(), reg.Pending())
	}
	t := time.NewTicker(every)
	defer t.Stop()
	report()
	for churnCtx.Err() == nil {
		select {
		case <-t.C:
			report()
		case <-churnCtx.Done():
		}
	}
	n := <-churned
	report()
	cancel()
	if err := <-done; err != nil {
		return err
	}
	fmt.Printf("churned %d writes in %s; the controller stopped cleanly\n", n, duration)
	_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	// Flat: after the first report under churn, the heap stays within 2x plus 4 MB of it
	// and no goroutine is added.
	if len(heaps) > 2 {
		base, baseG := heaps[1], goroutines[1]
		for i := 2; i < len(heaps); i++ {
			if heaps[i] > 2*base+4 || goroutines[i] > baseG {
				return fmt.Errorf("not flat: report %d has %.1f MB and %d goroutines, against %.1f MB and %d", i, heaps[i], goroutines[i], base, baseG)
			}
		}
		fmt.Printf("flat: heap %.1f..%.1f MB, goroutines %d..%d\n", slices.Min(heaps[1:]), slices.Max(heaps[1:]), baseG, goroutines[len(goroutines)-1])
	}
	return nil
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
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		return nil, nil, err
	}
	return cp.AdminConfig(), func() { _ = cp.Stop() }, nil
}
