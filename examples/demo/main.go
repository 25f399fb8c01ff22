// Command demo is typedinformer's showcase, run by `make demo`.
//
// It runs a typed controller over the ConfigMaps of a fresh namespace, against the
// cluster in $KUBECONFIG or, when that is unset, a local etcd and kube-apiserver that it
// starts and stops itself. It pre-creates some ConfigMaps so that the initial list is
// visible, then creates, updates and deletes ConfigMaps from a few workers while the
// controller watches, printing each event as one line, and ends with a summary that
// checks the controller's cache against a fresh List from the server.
//
// Exit status: 0 on success, 1 on an error or if the cache and the server disagree, 130
// when interrupted. In every case it stops what it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
)

// settings are the demo's knobs; the defaults give a run of a few seconds.
type settings struct {
	precreate   int
	create      int
	maxUpdates  int
	deleteRatio float64
	workers     int
	brief       bool
	seed        uint64
	converge    time.Duration
}

// demoLabel marks everything the demo creates, so that it is easy to find and clean up.
const demoLabel = "app.kubernetes.io/managed-by"

func main() {
	os.Exit(run())
}

func run() int {
	var s settings
	klog.InitFlags(nil) // -v and friends, for the library's and the control plane's logs
	// The defaults make about 180 events, few enough to read every line.
	flag.IntVar(&s.precreate, "precreate", 20, "ConfigMaps created before the controller starts (the initial list)")
	flag.IntVar(&s.create, "create", 30, "ConfigMaps created while the controller watches")
	flag.IntVar(&s.maxUpdates, "max-updates", 3, "each ConfigMap is updated 1 to this many times while watched")
	flag.Float64Var(&s.deleteRatio, "delete-ratio", 0.4, "fraction of the ConfigMaps deleted at the end of their updates")
	flag.IntVar(&s.workers, "workers", 4, "concurrent writers")
	flag.BoolVar(&s.brief, "brief", false, "print only the first and last events of each phase, for big workloads")
	flag.Uint64Var(&s.seed, "seed", 1, "seed of the random workload")
	flag.DurationVar(&s.converge, "converge-timeout", 30*time.Second, "how long the cache may take to match the server after the churn")
	flag.Parse()
	if s.workers < 1 || s.maxUpdates < 1 || s.precreate < 0 || s.create < 0 {
		fmt.Fprintln(os.Stderr, "demo: -workers and -max-updates must be at least 1, -precreate and -create at least 0")
		return 2
	}

	wallStart := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, restore the default behaviour so that a second Ctrl-C
	// kills the demo at once if the clean-up hangs (the control plane's processes die
	// with it: they get SIGKILL when their parent dies).
	context.AfterFunc(ctx, stop)

	err := demo(ctx, s)
	fmt.Printf("wall time %s\n", time.Since(wallStart).Round(time.Millisecond))
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "demo: interrupted; everything it started has been stopped")
		return 130
	default:
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
}

// demo runs the whole show. Its deferred calls undo, in reverse order, everything it
// set up, whether it returns normally, with an error or because ctx was cancelled.
func demo(ctx context.Context, s settings) (err error) {
	cl, err := connect(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cl.close()) }()
	cs, err := kubernetes.NewForConfig(cl.config)
	if err != nil {
		return fmt.Errorf("creating the clientset: %w", err)
	}

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "typedinformer-demo-",
		Labels:       map[string]string{demoLabel: "typedinformer-demo"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the namespace: %w", err)
	}
	fmt.Printf("namespace %s\n", ns.Name)
	if !cl.local {
		// A local control plane is thrown away whole; on a real cluster the namespace
		// (and with it every ConfigMap) must go. Cleanup must outlive a cancelled ctx.
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if derr := cs.CoreV1().Namespaces().Delete(dctx, ns.Name, metav1.DeleteOptions{}); derr != nil {
				err = errors.Join(err, fmt.Errorf("deleting namespace %s: %w", ns.Name, derr))
				return
			}
			fmt.Printf("deleted namespace %s\n", ns.Name)
		}()
	}
	client := cs.CoreV1().ConfigMaps(ns.Name)

	w := newWorkload(s, ns.Name, client)
	fmt.Printf("pre-creating %d ConfigMaps with %d workers\n", s.precreate, s.workers)
	if err := w.precreate(ctx); err != nil {
		return err
	}

	out := newPrinter(os.Stdout, s.brief)
	// Print the held-back last lines also when the demo stops early; by the time this
	// runs the controller has stopped, so no event can come after them.
	defer out.endPhase()
	rec := newRecorder(out)
	met := &metrics{}
	var ctrlErrors errorCounter
	c := controller.New(client, controller.Options[*corev1.ConfigMap]{
		Name:    "demo-configmaps",
		Metrics: met,
		// The library already logs every error through klog; the demo only counts them.
		OnError: func(context.Context, error) { ctrlErrors.add() },
		Indexers: eventcache.Indexers[*corev1.ConfigMap]{
			"color": func(cm *corev1.ConfigMap) ([]string, error) {
				if color, ok := cm.Data["color"]; ok {
					return []string{color}, nil
				}
				return nil, nil
			},
		},
	})
	reg, err := c.AddHandler("printer", controller.HandlerFunc[*corev1.ConfigMap](
		func(_ context.Context, e event.Event[*corev1.ConfigMap]) { rec.handle(e) }))
	if err != nil {
		return fmt.Errorf("adding the handler: %w", err)
	}

	// The controller gets its own context so that it can be stopped, and its goroutines
	// waited for, before the namespace and the control plane go away.
	runCtx, stopController := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	out.startPhase("initial list", 8, 2)
	rec.start = time.Now()
	go func() { runDone <- c.Run(runCtx) }()
	stopped := false
	stopRun := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stopController()
		return <-runDone
	}
	defer func() { err = errors.Join(err, stopRun()) }()

	// A controller that cannot list (no permission, say) retries forever and logs why;
	// the demo gives up after a minute instead of hanging.
	syncCtx, cancelSync := context.WithTimeout(ctx, time.Minute)
	err = c.WaitForSync(syncCtx)
	cancelSync()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("the controller did not sync within a minute (its errors are logged above)")
	}
	syncedAfter := time.Since(rec.start)
	select {
	case <-reg.Synced():
	case <-ctx.Done():
		return ctx.Err()
	}
	handlerSyncedAfter := time.Since(rec.start)
	listed := rec.snapshot().syncAdded
	out.endPhase()

	plan := w.plan()
	fmt.Printf("synced: %d objects listed, controller synced after %s, handler after %s\n",
		listed, round(syncedAfter), round(handlerSyncedAfter))
	fmt.Printf("churn: %d creates, %d updates, %d deletes with %d workers (updates read from the controller's cache)\n",
		plan.creates, plan.updates, plan.deletes, s.workers)
	out.startPhase("churn", 60, 20)
	rec.startChurn()
	churnStart := time.Now()
	if err := w.run(ctx, c.Store(), plan); err != nil {
		return err
	}
	writeTime := time.Since(churnStart)

	conv, err := waitConverged(ctx, client, c.Store(), rec, s.converge)
	out.endPhase()
	if err != nil {
		return err
	}

	st := rec.snapshot()
	sum := summary{
		cluster:       cl.describe,
		precreated:    s.precreate,
		listed:        listed,
		plan:          plan,
		workers:       s.workers,
		writeTime:     writeTime,
		staleReads:    w.staleReads.Load(),
		stats:         st,
		synced:        syncedAfter,
		handlerSynced: handlerSyncedAfter,
		churnStart:    churnStart,
		metrics:       met,
		errors:        ctrlErrors.get(),
		conv:          conv,
		colors:        colorCounts(c.Store()),
		regSynced:     reg.HasSynced(),
		regPending:    reg.Pending(),
	}
	stopStart := time.Now()
	if err := stopRun(); err != nil {
		return fmt.Errorf("running the controller: %w", err)
	}
	sum.stopTime = time.Since(stopStart)
	sum.print(os.Stdout)
	if !conv.equal {
		return fmt.Errorf("the cache did not match the server within %s: %s", s.converge, conv.detail)
	}
	return nil
}

// round rounds a duration for display, more finely when it is short.
func round(d time.Duration) time.Duration {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(time.Millisecond)
	}
}
