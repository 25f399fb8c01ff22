package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// result is what a subject process measures of itself, written to stdout as JSON.
type result struct {
	// CPU is the process's user and system time from starting the cache to synced (a
	// sync), or over the updates (steady).
	CPU time.Duration
	// HeapPerObject is the live heap, after two GCs, the synced cache added, per object.
	HeapPerObject float64
	// PeakRSS is the process's maximum resident set size, in bytes.
	PeakRSS int64
	Objects int
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func peakRSS() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss * 1024 // kilobytes on Linux
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// subject is one library's cache of one kind, behind what the scenarios need.
type subject struct {
	// start starts the cache and returns once it has synced.
	start func(ctx context.Context) error
}

// counter counts what the cache's one handler receives, and closes reached when the
// count reaches target: waiting for it costs no CPU, which would count as the library's.
type counter struct {
	n       atomic.Int64
	target  int64
	reached chan struct{}
}

func newCounter(target int) *counter {
	c := &counter{target: int64(target), reached: make(chan struct{})}
	if target <= 0 {
		close(c.reached)
	}
	return c
}

func (c *counter) add() {
	if c.n.Add(1) == c.target {
		close(c.reached)
	}
}

// runSubject is the child process: it syncs lib's cache of kind from the server
// kubeconfig names, which holds objects of them; for scenario "steady" it then prints "synced" and measures until it
// has received n modifications; it prints its result as JSON.
func runSubject(kubeconfig, lib, kind, ns, scenario string, objects, n int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	if kind == "pods" {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	adds, updates := newCounter(objects), newCounter(n)
	mopts := manager.Options{}
	subjectLib := lib
	switch lib {
	case pagedLib:
		mopts.NoWatchList, subjectLib = true, "typedinformer"
	case noIntern:
		mopts.NoStringInterning, subjectLib = true, "typedinformer"
	}
	s, err := newSubject(cfg, subjectLib, kind, ns, mopts, adds, updates)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A CPU profile of what is measured (the sync, or the steady state after it), for go
	// tool pprof.
	profile := func() (stop func(), err error) {
		dir := os.Getenv("REALAPI_PROFILE")
		if dir == "" {
			return func() {}, nil
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-%s.pprof", lib, kind, scenario)))
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return nil, err
		}
		return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
	}
	stopProfile := func() {}
	if scenario != "steady" {
		if stopProfile, err = profile(); err != nil {
			return err
		}
	}
	heap0 := liveHeap()
	cpu0 := cpuTime()
	if err := s.start(ctx); err != nil {
		return err
	}
	// controller-runtime's and client-go's caches say they synced once their store has
	// the list, before their handlers have seen it: wait for those too, as typedinformer's
	// synced means.
	<-adds.reached
	r := result{CPU: cpuTime() - cpu0, Objects: int(adds.n.Load())}
	r.HeapPerObject = (float64(liveHeap()) - float64(heap0)) / float64(max(r.Objects, 1))
	if scenario == "steady" {
		if stopProfile, err = profile(); err != nil {
			return err
		}
		fmt.Println("synced")
		cpu1 := cpuTime()
		<-updates.reached
		r.CPU = (cpuTime() - cpu1) / time.Duration(n)
	}
	stopProfile()
	r.PeakRSS = peakRSS()
	return json.NewEncoder(os.Stdout).Encode(r)
}

func newSubject(cfg *rest.Config, lib, kind, ns string, mopts manager.Options, adds, updates *counter) (*subject, error) {
	switch lib + "/" + kind {
	case "typedinformer/widgets":
		widgets, err := client.ForResource[*Widget](cfg, widgetGVR)
		if err != nil {
			return nil, err
		}
		return typedinformerSubject(manager.Namespaced[*Widget](widgets), ns, mopts, adds, updates)
	case "typedinformer/pods":
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		return typedinformerSubject(manager.Namespaced[*corev1.Pod](cs.CoreV1().Pods), ns, mopts, adds, updates)
	case bareController + "/widgets":
		widgets, err := client.ForResource[*Widget](cfg, widgetGVR)
		if err != nil {
			return nil, err
		}
		return controllerSubject(widgets(ns).WithoutManagedFields(), adds, updates)
	case watchOnly + "/widgets":
		widgets, err := client.ForResource[*Widget](cfg, widgetGVR)
		if err != nil {
			return nil, err
		}
		return watchOnlySubject(widgets(ns).WithoutManagedFields(), nil, adds, updates), nil
	case watchKept + "/widgets":
		widgets, err := client.ForResource[*Widget](cfg, widgetGVR)
		if err != nil {
			return nil, err
		}
		return watchOnlySubject(widgets(ns).WithoutManagedFields(), map[string]*Widget{}, adds, updates), nil
	case objectsOnly + "/pods":
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		return objectsOnlySubject(cs, ns, adds), nil
	case "controller-runtime/widgets":
		return controllerRuntimeSubject(cfg, &Widget{}, ns, adds, updates)
	case "controller-runtime/pods":
		return controllerRuntimeSubject(cfg, &corev1.Pod{}, ns, adds, updates)
	case "client-go/widgets":
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		inf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil).ForResource(widgetGVR).Informer()
		return clientGoSubject(inf, adds, updates)
	case "client-go/pods":
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		inf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns)).Core().V1().Pods().Informer()
		return clientGoSubject(inf, adds, updates)
	}
	return nil, fmt.Errorf("no subject %s/%s", lib, kind)
}

// counting is typedinformer's one handler: it counts additions and modifications.
func counting[T event.Object](adds, updates *counter) controller.HandlerFunc[T] {
	return func(_ context.Context, e event.Event[T]) {
		switch {
		case e.Type == event.Added:
			adds.add()
		case e.Type == event.Modified && !e.Sync:
			updates.add()
		}
	}
}

func typedinformerSubject[T event.Object, L reflect.List](src manager.Source[T, L], ns string, mopts manager.Options, adds, updates *counter) (*subject, error) {
	m := manager.New(mopts)
	c, err := manager.Acquire(m, src, manager.CacheOptions[T]{Namespaces: []string{ns}})
	if err != nil {
		return nil, err
	}
	if _, err := c.AddHandler("count", counting[T](adds, updates)); err != nil {
		return nil, err
	}
	return &subject{start: func(ctx context.Context) error {
		go func() { _ = m.Run(ctx) }()
		return c.WaitForSync(ctx)
	}}, nil
}

// kept holds the objects-only subject's Pods, so that they are live when its heap is
// measured.
var kept []*corev1.Pod

// objectsOnlySubject lists the Pods page by page (500 a page, as the caches do) and keeps
// each as a cache would, with managedFields dropped and strings interned as
// typedinformer's Manager does by default, but with no cache around them: no map, no
// key, no index, no queue.
func objectsOnlySubject(cs kubernetes.Interface, ns string, adds *counter) *subject {
	return &subject{start: func(ctx context.Context) error {
		opts := metav1.ListOptions{Limit: 500}
		for {
			l, err := cs.CoreV1().Pods(ns).List(ctx, opts)
			if err != nil {
				return err
			}
			for i := range l.Items {
				p, err := cacheTransform(&l.Items[i])
				if err != nil {
					return err
				}
				kept = append(kept, p)
				adds.add()
			}
			if opts.Continue = l.Continue; opts.Continue == "" {
				return nil
			}
		}
	}}
}

// cacheTransform is what a Manager's cache does to each object at its defaults: drop its
// managedFields, intern its strings.
func cacheTransform[T event.Object](obj T) (T, error) {
	obj, _ = client.StripManagedFields(obj)
	return client.InternStrings(obj)
}

// controllerSubject is typedinformer's pipeline without a Manager: a controller.New
// over the client, with the client (managedFields not decoded), transform and watch-list
// a Manager's cache has by default, and the same one handler.
func controllerSubject(lw reflect.ListerWatcher[*Widget, *client.List[*Widget]], adds, updates *counter) (*subject, error) {
	c, err := controller.New(lw, controller.Options[*Widget]{Options: reflect.Options[*Widget]{
		WatchList: true,
		Transform: cacheTransform[*Widget],
	}})
	if err != nil {
		return nil, err
	}
	if _, err := c.AddHandler("count", counting[*Widget](adds, updates)); err != nil {
		return nil, err
	}
	return &subject{start: func(ctx context.Context) error {
		go func() { _ = c.Run(ctx) }()
		return c.WaitForSync(ctx)
	}}, nil
}

// watchOnlySubject lists the widgets page by page and then watches them with the same
// client and decoder as typedinformer's cache (managedFields not decoded), counting what
// it reads. With kept nil it
// keeps nothing: no cache, no transform, no queue; its CPU per update is the floor of
// any client over that decoder: receiving and decoding the events. Otherwise it keeps
// every object in kept by namespace and name, after the transform of a Manager's cache
// (managedFields dropped, strings interned), on the watch's goroutine: the least any
// cache that holds the objects does, with no queue, no index and no handler.
func watchOnlySubject(lw reflect.ListerWatcher[*Widget, *client.List[*Widget]], kept map[string]*Widget, adds, updates *counter) *subject {
	keep := func(w *Widget) {
		if kept == nil {
			return
		}
		w, _ = cacheTransform(w)
		kept[w.Namespace+"/"+w.Name] = w
	}
	return &subject{start: func(ctx context.Context) error {
		opts := metav1.ListOptions{Limit: 500}
		var rv string
		for {
			l, err := lw.List(ctx, opts)
			if err != nil {
				return err
			}
			for i := range l.Items {
				keep(l.Items[i])
				adds.add()
			}
			rv = l.ResourceVersion
			if opts.Continue = l.Continue; opts.Continue == "" {
				break
			}
		}
		w, err := lw.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return err
		}
		go func() {
			defer w.Stop()
			for e := range w.ResultChan() {
				if e.Type == watch.Modified {
					keep(e.Object.(*Widget))
					updates.add()
				}
			}
		}()
		return nil
	}}
}

func controllerRuntimeSubject(cfg *rest.Config, obj crcacheObject, ns string, adds, updates *counter) (*subject, error) {
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := addWidgets(scheme); err != nil {
		return nil, err
	}
	c, err := crcache.New(cfg, crcache.Options{Scheme: scheme, DefaultNamespaces: map[string]crcache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	return &subject{start: func(ctx context.Context) error {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(count(adds, updates)); err != nil {
			return err
		}
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			return fmt.Errorf("controller-runtime's cache did not sync")
		}
		return nil
	}}, nil
}

type crcacheObject = interface {
	metav1.Object
	k8sruntime.Object
}

func clientGoSubject(inf cache.SharedIndexInformer, adds, updates *counter) (*subject, error) {
	if _, err := inf.AddEventHandler(count(adds, updates)); err != nil {
		return nil, err
	}
	return &subject{start: func(ctx context.Context) error {
		go inf.Run(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("client-go's informer did not sync")
		}
		return nil
	}}, nil
}

// count counts a client-go handler's additions and modifications.
func count(adds, updates *counter) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{AddFunc: func(any) { adds.add() }, UpdateFunc: func(_, _ any) { updates.add() }}
}

// waitForLine reads r until it has read want, for the parent to know a child synced.
func waitForLine(r *bufio.Reader, want string) error {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("waiting for %q: %w", want, err)
		}
		if line == want+"\n" {
			return nil
		}
	}
}
