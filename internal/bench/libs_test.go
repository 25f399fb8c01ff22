package bench

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/reflect"
)

// configMapLW is what both libraries are started on: a Source, or a generated typed client
// (clientset.CoreV1().ConfigMaps(ns)) for the real control plane.
type configMapLW interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// informer is a running typedinformer controller or client-go informer, as the
// benchmarks see it. Reads go straight to each library's own cache API, the typed one
// where the library has one.
type informer interface {
	// synced reports whether the library and its one handler have synced.
	synced() bool
	get(key string) (*corev1.ConfigMap, bool)
	// list and byNamespace return how many objects they found, so that the compiler
	// cannot drop the call.
	list() int
	byNamespace(ns string) int
	// stop cancels the run and waits until every goroutine of the library has ended.
	stop()
	// errs returns the errors the library reported while running.
	errs() []error
}

// library starts one of the libraries on lw with one handler that reports to rec.
type library struct {
	name  string
	start func(lw configMapLW, rec *recorder) informer
}

// libraries are the sides of every comparison, in the order they run: typedinformer,
// client-go's SharedIndexInformer, and the same informer behind client-go's typed
// wrapper, TypedSharedIndexInformer[*corev1.ConfigMap] (typed handlers and indexer).
var libraries = []library{
	{name: "typedinformer", start: startTypedinformer},
	{name: "client-go", start: startClientGo},
	{name: "client-go-typed", start: startClientGoTyped},
}

// errorLog collects reported errors until stop begins.
type errorLog struct {
	mu      sync.Mutex
	stopped bool
	list    []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	if !l.stopped {
		l.list = append(l.list, err)
	}
	l.mu.Unlock()
}

func (l *errorLog) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

func (l *errorLog) errs() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.list...)
}

// typedRun is a running typedinformer controller.
type typedRun struct {
	errorLog
	c      *controller.Controller[*corev1.ConfigMap, *corev1.ConfigMapList]
	reg    *controller.Registration
	cancel context.CancelFunc
	done   chan struct{}
}

// startTypedinformer runs controller.New with its default options (watch-list off), plus
// an error handler so that the benchmark fails instead of measuring a broken run.
func startTypedinformer(lw configMapLW, rec *recorder) informer {
	r := &typedRun{done: make(chan struct{})}
	c, err := controller.New(lw, controller.Options[*corev1.ConfigMap]{
		Options: reflect.Options[*corev1.ConfigMap]{OnError: func(_ context.Context, err error) { r.add(err) }},
	})
	if err != nil {
		panic(err) // the options are this function's own: cannot happen
	}
	r.c = c
	reg, err := r.c.AddHandler("bench", controller.HandlerFuncs[*corev1.ConfigMap]{
		AddFunc:    func(_ context.Context, obj *corev1.ConfigMap) { rec.onAdd(obj) },
		UpdateFunc: func(_ context.Context, _, obj *corev1.ConfigMap) { rec.onUpdate(obj) },
	})
	if err != nil {
		panic(err) // the controller has not started: cannot happen
	}
	r.reg = reg
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		_ = r.c.Run(ctx)
	}()
	return r
}

func (r *typedRun) synced() bool { return r.c.HasSynced() && r.reg.HasSynced() }

func (r *typedRun) get(key string) (*corev1.ConfigMap, bool) { return r.c.Store().Get(key) }

func (r *typedRun) list() int { return len(r.c.Store().List()) }

func (r *typedRun) byNamespace(ns string) int {
	objs, err := r.c.Store().ByIndex(eventcache.NamespaceIndex, ns)
	if err != nil {
		panic(err)
	}
	return len(objs)
}

func (r *typedRun) stop() {
	r.errorLog.stop()
	r.cancel()
	<-r.done
}

// clientGoRun is a running client-go SharedIndexInformer.
type clientGoRun struct {
	errorLog
	inf    cache.SharedIndexInformer
	idx    cache.Indexer
	reg    cache.ResourceEventHandlerRegistration
	cancel context.CancelFunc
	done   chan struct{}
}

// startClientGo runs cache.NewSharedIndexInformer with default options (no resync) and
// the namespace index, as the generated informers (NewFilteredConfigMapInformer) do, on a
// cache.ListWatch over lw, as the generated informers build it.
func startClientGo(lw configMapLW, rec *recorder) informer {
	r := &clientGoRun{done: make(chan struct{})}
	r.inf = cache.NewSharedIndexInformer(clientGoListWatch(lw), &corev1.ConfigMap{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	r.idx = r.inf.GetIndexer()
	if err := r.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		r.add(err)
	}); err != nil {
		panic(err)
	}
	reg, err := r.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { rec.onAdd(obj.(*corev1.ConfigMap)) },
		UpdateFunc: func(_, obj any) { rec.onUpdate(obj.(*corev1.ConfigMap)) },
	})
	if err != nil {
		panic(err)
	}
	r.reg = reg
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.inf.RunWithContext(ctx)
	}()
	return r
}

func (r *clientGoRun) synced() bool { return r.inf.HasSynced() && r.reg.HasSynced() }

func (r *clientGoRun) get(key string) (*corev1.ConfigMap, bool) {
	obj, ok, err := r.idx.GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	return obj.(*corev1.ConfigMap), true
}

func (r *clientGoRun) list() int { return len(r.idx.List()) }

func (r *clientGoRun) byNamespace(ns string) int {
	objs, err := r.idx.ByIndex(cache.NamespaceIndex, ns)
	if err != nil {
		panic(err)
	}
	return len(objs)
}

func (r *clientGoRun) stop() {
	r.errorLog.stop()
	r.cancel()
	<-r.done
}

// clientGoListWatch is the cache.ListWatch over lw that both client-go informers run on,
// built as the generated informers build theirs.
func clientGoListWatch(lw configMapLW) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (k8sruntime.Object, error) {
			l, err := lw.List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		WatchFuncWithContext: lw.Watch,
	}
}

// clientGoTypedRun is a running client-go TypedSharedIndexInformer[*corev1.ConfigMap].
type clientGoTypedRun struct {
	errorLog
	inf    cache.TypedSharedIndexInformer[*corev1.ConfigMap]
	idx    cache.TypedIndexer[*corev1.ConfigMap]
	reg    cache.ResourceEventHandlerRegistration
	cancel context.CancelFunc
	done   chan struct{}
}

// startClientGoTyped runs cache.NewTypedSharedIndexInformer[*corev1.ConfigMap] over
// cache.NewSharedIndexInformer with default options (no resync), on the same
// cache.ListWatch as startClientGo, through the typed API wherever client-go v0.37 has
// one: the namespace index as a typed index function (AddTypedIndexers), the handler as a
// TypedResourceEventHandlerFuncs (AddTypedEventHandler), reads through GetTypedIndexer.
// Underneath, it is the same informer, store and processor as startClientGo's: the
// typed layer wraps the handler (a type assertion per call) and the indexer.
func startClientGoTyped(lw configMapLW, rec *recorder) informer {
	r := &clientGoTypedRun{done: make(chan struct{})}
	r.inf = cache.NewTypedSharedIndexInformer[*corev1.ConfigMap](
		cache.NewSharedIndexInformer(clientGoListWatch(lw), &corev1.ConfigMap{}, 0, cache.Indexers{}))
	if err := r.inf.AddTypedIndexers(cache.TypedIndexers[*corev1.ConfigMap]{
		cache.NamespaceIndex: func(obj *corev1.ConfigMap) ([]string, error) { return []string{obj.Namespace}, nil },
	}); err != nil {
		panic(err)
	}
	r.idx = r.inf.GetTypedIndexer()
	if err := r.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		r.add(err)
	}); err != nil {
		panic(err)
	}
	reg, err := r.inf.AddTypedEventHandler(cache.TypedResourceEventHandlerFuncs[*corev1.ConfigMap]{
		AddFunc:    func(obj *corev1.ConfigMap) { rec.onAdd(obj) },
		UpdateFunc: func(_, obj *corev1.ConfigMap) { rec.onUpdate(obj) },
	})
	if err != nil {
		panic(err)
	}
	r.reg = reg
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.inf.RunWithContext(ctx)
	}()
	return r
}

func (r *clientGoTypedRun) synced() bool { return r.inf.HasSynced() && r.reg.HasSynced() }

// get: TypedIndexer has no typed Get, so this is the untyped GetByKey and the type
// assertion, as with the untyped informer.
func (r *clientGoTypedRun) get(key string) (*corev1.ConfigMap, bool) {
	obj, ok, err := r.idx.GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	return obj.(*corev1.ConfigMap), true
}

// list: TypedIndexer has no typed List either; a caller that needs []*corev1.ConfigMap
// converts the untyped List, as client-go's own ByTypedIndex does for an index.
func (r *clientGoTypedRun) list() int {
	untyped := r.idx.List()
	typed := make([]*corev1.ConfigMap, len(untyped))
	for i, obj := range untyped {
		typed[i] = obj.(*corev1.ConfigMap)
	}
	listSink = typed // so that the conversion cannot be optimised away
	return len(typed)
}

// listSink holds the last typed list of clientGoTypedRun.list.
var listSink []*corev1.ConfigMap

func (r *clientGoTypedRun) byNamespace(ns string) int {
	objs, err := r.idx.ByTypedIndex(cache.NamespaceIndex, ns)
	if err != nil {
		panic(err)
	}
	return len(objs)
}

func (r *clientGoTypedRun) stop() {
	r.errorLog.stop()
	r.cancel()
	<-r.done
}

// recorder is the state of the one handler every library calls. Its work per event is
// the same for all: a counter, parsing the resource version (Dataset.IsFinal), and a
// channel close at the end.
type recorder struct {
	// isFinal tells the last state of a key in the stream; nil when not needed.
	isFinal func(*corev1.ConfigMap) bool
	// block, when not nil, stalls every modification until it is closed.
	block chan struct{}

	adds, updates atomic.Int64
	addsDone      atomic.Pointer[countdown]
	finalsDone    atomic.Pointer[countdown]
}

// countdown is closed when it has been hit n times.
type countdown struct {
	left atomic.Int64
	done chan struct{}
}

func newCountdown(n int) *countdown {
	c := &countdown{done: make(chan struct{})}
	c.left.Store(int64(n))
	if n == 0 {
		close(c.done)
	}
	return c
}

func (c *countdown) hit() {
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// expectAdds arms a countdown of n additions and returns its channel.
func (r *recorder) expectAdds(n int) <-chan struct{} {
	c := newCountdown(n)
	r.addsDone.Store(c)
	return c.done
}

// expectFinals arms a countdown of n final states and returns its channel.
func (r *recorder) expectFinals(n int) <-chan struct{} {
	c := newCountdown(n)
	r.finalsDone.Store(c)
	return c.done
}

func (r *recorder) onAdd(*corev1.ConfigMap) {
	r.adds.Add(1)
	if c := r.addsDone.Load(); c != nil {
		c.hit()
	}
}

func (r *recorder) onUpdate(obj *corev1.ConfigMap) {
	if r.block != nil {
		<-r.block
	}
	r.updates.Add(1)
	if r.isFinal != nil && r.isFinal(obj) {
		if c := r.finalsDone.Load(); c != nil {
			c.hit()
		}
	}
}

// waitTimeout bounds every wait of a benchmark, so that a hang (such as client-go waiting
// for a watch-list bookmark) fails with a message instead of the test binary's timeout.
const waitTimeout = 3 * time.Minute

// wait waits for ch or fails b after waitTimeout.
func wait(b *testing.B, ch <-chan struct{}, what string) {
	b.Helper()
	t := time.NewTimer(waitTimeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		b.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
	}
}

// startSynced starts lib on lw, waits until its handler has seen n additions and it
// reports synced, and returns it. With a Source it also returns the watch opened after
// the list, ready for pushes. If it fails b, it stops the library first.
func startSynced(b *testing.B, lib library, lw configMapLW, rec *recorder, n int) (informer, *Watch) {
	b.Helper()
	added := rec.expectAdds(n)
	inf := lib.start(lw, rec)
	ok := false
	defer func() {
		if !ok {
			inf.stop()
		}
	}()
	wait(b, added, "the initial additions")
	waitSynced(b, inf)
	var w *Watch
	if src, isSource := lw.(*Source); isSource {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		var err error
		if w, err = src.NextWatch(ctx); err != nil {
			b.Fatal(err)
		}
	}
	ok = true
	return inf, w
}

// waitSynced polls until inf reports synced: both libraries can deliver the last
// addition a moment before they flip their synced flags.
func waitSynced(b *testing.B, inf informer) {
	b.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !inf.synced() {
		if time.Now().After(deadline) {
			b.Fatalf("not synced after %v", waitTimeout)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// stopAndCheck stops inf and fails b if it reported errors.
func stopAndCheck(b *testing.B, inf informer) {
	b.Helper()
	inf.stop()
	for _, err := range inf.errs() {
		b.Errorf("library reported an error: %v", err)
	}
}

// checkLeaks returns a function that fails b if a goroutine started after checkLeaks was
// called is still running. It retries for a while, so that goroutines on their way out
// do not count; settle, when not nil, is called before every attempt (to close idle
// HTTP connections, whose goroutines end only then).
func checkLeaks(b *testing.B, settle func()) func() {
	ignore := goleak.IgnoreCurrent()
	return func() {
		b.Helper()
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; {
			if settle != nil {
				settle()
			}
			if err = goleak.Find(ignore); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			b.Errorf("goroutines left running after the benchmark: %v", err)
		}
	}
}

// memSnapshot is the allocation counters and the process's CPU time at one moment.
type memSnapshot struct {
	bytes, allocs uint64
	cpu           time.Duration
}

func readAllocs() memSnapshot {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cpu, _ := processCPU()
	return memSnapshot{bytes: ms.TotalAlloc, allocs: ms.Mallocs, cpu: cpu}
}

// allocMeter adds up allocations and CPU time over the timed sections of a benchmark, as
// testing's own -benchmem counters do, so that per-event and per-object figures can be
// reported when one op is a batch.
type allocMeter struct {
	start       memSnapshot
	bytes, objs uint64
	cpu         time.Duration
	elapsed     time.Duration
	t0          time.Time
}

// begin starts a timed section, together with b's timer.
func (m *allocMeter) begin(b *testing.B) {
	m.start = readAllocs()
	m.t0 = time.Now()
	b.StartTimer()
}

// end ends a timed section, together with b's timer.
func (m *allocMeter) end(b *testing.B) {
	b.StopTimer()
	m.elapsed += time.Since(m.t0)
	s := readAllocs()
	m.bytes += s.bytes - m.start.bytes
	m.objs += s.allocs - m.start.allocs
	m.cpu += s.cpu - m.start.cpu
}

// report reports time, bytes and allocations per unit, n units in all, and the CPU time
// per unit (cpu-ns/unit) where the platform tells it. The CPU time is the whole
// process's, user and system, on every core: the library's goroutines, the input's,
// the garbage collector's. Where the input is the bottleneck, so that every library
// reaches about the same rate, it still tells how much work each one did per event.
func (m *allocMeter) report(b *testing.B, n int, unit string) {
	b.ReportMetric(float64(m.elapsed.Nanoseconds())/float64(n), "ns/"+unit)
	b.ReportMetric(float64(m.bytes)/float64(n), "B/"+unit)
	b.ReportMetric(float64(m.objs)/float64(n), "allocs/"+unit)
	if _, ok := processCPU(); ok {
		b.ReportMetric(float64(m.cpu.Nanoseconds())/float64(n), "cpu-ns/"+unit)
	}
}

// gcNow collects garbage twice, so that what the previous benchmark left behind is not
// collected (and paid for) inside the next timed section.
func gcNow() {
	runtime.GC()
	runtime.GC()
}
