// Package prometheus exports the counters, gauges and histograms of typedinformer's
// controllers (controller.Metrics), reconcile loops (typed.Metrics, typed.WorkMetrics,
// typed.ConsistencyMetrics) and sharders (shard.Metrics) to Prometheus, under
// controller-runtime's names as well as the library's own, and serves them.
//
// The library has no dependency on any metrics library; this adapter is a Go module of
// its own (github.com/typedinformer/typedinformer/typed/metrics/prometheus), so that only
// programs that use it depend on Prometheus's client. One call gives the sink and the
// handler, which a Manager serves:
//
//	pm := prometheus.New(prometheus.Options{}) // its own registry, with the Go and process collectors
//	m := manager.New(manager.Options{Metrics: pm, MetricsAddress: ":8080", MetricsHandler: pm.Handler(),
//		MetricsAuth: clientset}) // optional: TokenReview and SubjectAccessReview of each scrape
//
// or, for a controller and a loop of one's own:
//
//	pods, err := controller.New(cs.CoreV1().Pods(ns), controller.Options[*corev1.Pod]{
//		Options: reflect.Options[*corev1.Pod]{Name: "pods"}, Metrics: pm})
//	loop, err := typed.NewLoop(pods, reconciler, typed.Options{Name: "pods", Metrics: pm})
//
// Metrics is a prometheus.Collector holding every metric vector, and the whole metrics
// family of the library: every call names its controller, loop or shard group, which its
// samples carry as the "controller", "loop" or "group" label.
//
// # controller-runtime's names
//
// So that controller-runtime's dashboards and alerts work unchanged, a loop's metrics are
// also exported under controller-runtime's names, labels, buckets and help texts, a
// loop's name (typed.Options.Name) being the "controller" label, and its queue's "name"
// and "controller":
//
//	controller_runtime_reconcile_total{controller,result}       counter: success, error, requeue_after (requeue stays 0: typed.Result has none)
//	controller_runtime_reconcile_errors_total{controller}        counter
//	controller_runtime_terminal_reconcile_errors_total{controller}
//	controller_runtime_reconcile_panics_total{controller}
//	controller_runtime_reconcile_time_seconds{controller}        histogram, controller-runtime's buckets
//	controller_runtime_max_concurrent_reconciles{controller}     gauge: typed.Options.Workers
//	controller_runtime_active_workers{controller}                gauge: workers reconciling
//	workqueue_depth{name,controller}                             gauge
//	workqueue_adds_total{name,controller}                        counter: keys queued (not those added again while waiting)
//	workqueue_queue_duration_seconds{name,controller}            histogram
//	workqueue_work_duration_seconds{name,controller}             histogram
//	workqueue_unfinished_work_seconds{name,controller}           gauge, computed at each scrape
//	workqueue_longest_running_processor_seconds{name,controller} gauge, computed at each scrape
//	workqueue_retries_total{name,controller}                     counter: keys put back after an error
//	rest_client_requests_total{code,method,host}                 counter: client-go's requests, the process's
//	leader_election_master_status{name}                          gauge: 1 while this process holds the Lease name
//
// A reconcile interrupted by its loop stopping is not counted in reconcile_total:
// controller-runtime counts it as an error, the library does not see it as one. The
// last two are client-go's process-wide hooks (see Options.NoClientGoMetrics).
//
// # The library's own
//
// With the default namespace "typedinformer", the metrics are:
//
//	typedinformer_reflector_lists_total{controller}                   counter: relists included
//	typedinformer_reflector_list_items{controller}                    gauge: items of the last list
//	typedinformer_reflector_list_duration_seconds{controller}         histogram
//	typedinformer_reflector_watch_events_total{controller,type}       counter: ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
//	typedinformer_reflector_resource_version{controller}              gauge: the newest resource version, when it is an integer
//	typedinformer_reflector_errors_total{controller}                  counter: list and watch errors
//	typedinformer_controller_queue_depth{controller}                  gauge: keys with pending events
//	typedinformer_handler_duration_seconds{controller,handler}        histogram
//	typedinformer_handler_panics_total{controller,handler}            counter
//	typedinformer_reconcile_queue_depth{loop}                         gauge: keys waiting to be reconciled
//	typedinformer_reconcile_duration_seconds{loop}                    histogram
//	typedinformer_reconcile_errors_total{loop,terminal}               counter: terminal "true" or "false"
//	typedinformer_reconcile_retries_total{loop}                       counter
//	typedinformer_consistency_keys_waiting{loop}                      gauge: keys waiting for their writes (read your writes)
//	typedinformer_consistency_write_wait_seconds{loop}                histogram
//	typedinformer_consistency_stale_bound_total{loop}                 counter: waits that reached StaleBound
//	typedinformer_consistency_fence_seconds{loop}                     histogram: a Run's wait for a consistent read
//	typedinformer_shard_held{group}                                   gauge: shards this replica works on
//	typedinformer_shard_moves_total{group,direction}                  counter: direction "gained" or "lost"
//	typedinformer_shard_handover_seconds{group}                       histogram: decision to first reconcile
//	typedinformer_shard_objects{group,shard}                          gauge: objects cached for a shard held
//	typedinformer_shard_keys{group,shard}                             gauge: keys of a shard waiting
//
// Metrics is also the shard.Metrics of a Sharder (shard.Options.Metrics); a shard's
// gauges are dropped when the replica gives the shard up.
package prometheus

import (
	"net/http"
	"strconv"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// Options configure the metrics. The zero value is ready to use.
type Options struct {
	// Namespace prefixes every metric name; "typedinformer" when empty.
	Namespace string
	// Buckets of the duration histograms, in seconds; prometheus.DefBuckets when nil.
	Buckets []float64
	// ConstLabels are added to every metric, e.g. the name of the program.
	ConstLabels prom.Labels
	// Registry is the registry New registers the metrics in and Handler serves; when
	// nil, a new one, with the Go runtime's and the process's collectors, as
	// controller-runtime's registry has. New panics if the registry refuses the metrics
	// (it holds metrics of the same names already: another Metrics), as
	// prometheus.MustRegister does.
	Registry *prom.Registry
	// NoClientGoMetrics leaves out rest_client_requests_total and
	// leader_election_master_status. They are the process's: client-go takes one adapter
	// for them per process, which the first New registers (and forwards to every Metrics
	// made with them), so that a registry holding two Metrics would count them twice, and
	// a program that registered other adapters with client-go first sees them at zero
	// (New logs it).
	NoClientGoMetrics bool
}

// Metrics holds the metric vectors of any number of controllers, loops and shard groups.
// Register it once with a prometheus.Registerer; it is the manager.Metrics of a Manager
// (its caches' controller.Metrics and its loops' typed.Metrics) and the shard.Metrics of
// a Sharder. It is safe for concurrent use.
type Metrics struct {
	lists           *prom.CounterVec
	listItems       *prom.GaugeVec
	listDuration    *prom.HistogramVec
	watchEvents     *prom.CounterVec
	resourceVersion *prom.GaugeVec
	errors          *prom.CounterVec
	queueDepth      *prom.GaugeVec
	handlerDuration *prom.HistogramVec
	handlerPanics   *prom.CounterVec

	loopDepth         *prom.GaugeVec
	reconcileDuration *prom.HistogramVec
	reconcileErrors   *prom.CounterVec
	retries           *prom.CounterVec

	shardsHeld   *prom.GaugeVec
	shardMoves   *prom.CounterVec
	handOver     *prom.HistogramVec
	shardObjects *prom.GaugeVec
	shardKeys    *prom.GaugeVec

	keysWaiting   *prom.GaugeVec
	writeWait     *prom.HistogramVec
	staleBoundHit *prom.CounterVec
	fence         *prom.HistogramVec

	runtime  *runtimeMetrics
	registry *prom.Registry
}

var (
	_ prom.Collector           = (*Metrics)(nil)
	_ manager.Metrics          = (*Metrics)(nil)
	_ shard.Metrics            = (*Metrics)(nil)
	_ typed.WorkMetrics        = (*Metrics)(nil)
	_ typed.ConsistencyMetrics = (*Metrics)(nil)
)

// New returns the metrics, registered in Options.Registry (or a registry of their own),
// and, unless Options.NoClientGoMetrics, hooked to client-go's rest client and leader
// election metrics. They can be registered in other registries too.
func New(opts Options) *Metrics {
	ns := opts.Namespace
	if ns == "" {
		ns = "typedinformer"
	}
	buckets := opts.Buckets
	if buckets == nil {
		buckets = prom.DefBuckets
	}
	counter := func(subsystem, name, help string, labels ...string) *prom.CounterVec {
		return prom.NewCounterVec(prom.CounterOpts{Namespace: ns, Subsystem: subsystem, Name: name, Help: help,
			ConstLabels: opts.ConstLabels}, labels)
	}
	gauge := func(subsystem, name, help string, labels ...string) *prom.GaugeVec {
		return prom.NewGaugeVec(prom.GaugeOpts{Namespace: ns, Subsystem: subsystem, Name: name, Help: help,
			ConstLabels: opts.ConstLabels}, labels)
	}
	histogram := func(subsystem, name, help string, labels ...string) *prom.HistogramVec {
		return prom.NewHistogramVec(prom.HistogramOpts{Namespace: ns, Subsystem: subsystem, Name: name, Help: help,
			ConstLabels: opts.ConstLabels, Buckets: buckets}, labels)
	}
	m := &Metrics{
		lists:           counter("reflector", "lists_total", "Lists (or watch-lists) that replaced a controller's cache.", "controller"),
		listItems:       gauge("reflector", "list_items", "Items of a controller's last list.", "controller"),
		listDuration:    histogram("reflector", "list_duration_seconds", "Time taken by a controller's lists.", "controller"),
		watchEvents:     counter("reflector", "watch_events_total", "Watch events received by a controller, by type.", "controller", "type"),
		resourceVersion: gauge("reflector", "resource_version", "Newest resource version a controller has seen, when it is an integer.", "controller"),
		errors:          counter("reflector", "errors_total", "List and watch errors of a controller.", "controller"),
		queueDepth:      gauge("controller", "queue_depth", "Keys with pending events in a controller's event cache.", "controller"),
		handlerDuration: histogram("handler", "duration_seconds", "Time taken by each call of a handler.", "controller", "handler"),
		handlerPanics:   counter("handler", "panics_total", "Panics recovered from a handler.", "controller", "handler"),

		loopDepth:         gauge("reconcile", "queue_depth", "Keys waiting to be reconciled by a loop.", "loop"),
		reconcileDuration: histogram("reconcile", "duration_seconds", "Time taken by each reconcile of a loop.", "loop"),
		reconcileErrors:   counter("reconcile", "errors_total", "Reconciles of a loop that returned an error, terminal or not.", "loop", "terminal"),
		retries:           counter("reconcile", "retries_total", "Keys of a loop put back after an error.", "loop"),

		shardsHeld:   gauge("shard", "held", "Shards this replica works on.", "group"),
		shardMoves:   counter("shard", "moves_total", "Shards this replica started (gained) or stopped (lost) working on.", "group", "direction"),
		handOver:     histogram("shard", "handover_seconds", "Time from this replica's decision to take a shard to its first reconcile in it.", "group"),
		shardObjects: gauge("shard", "objects", "Objects cached for a shard this replica holds.", "group", "shard"),
		shardKeys:    gauge("shard", "keys", "Keys of a shard this replica holds waiting to be reconciled.", "group", "shard"),

		keysWaiting:   gauge("consistency", "keys_waiting", "Keys of a loop waiting for its caches to apply their writes (read your writes).", "loop"),
		writeWait:     histogram("consistency", "write_wait_seconds", "Time a key waited for its caches to apply its writes.", "loop"),
		staleBoundHit: counter("consistency", "stale_bound_total", "Times a key waited the loop's StaleBound for its caches.", "loop"),
		fence:         histogram("consistency", "fence_seconds", "Time a loop's Run waited for its caches to reach a consistent read before reconciling.", "loop"),

		runtime:  newRuntimeMetrics(opts.ConstLabels, !opts.NoClientGoMetrics),
		registry: opts.Registry,
	}
	if m.registry == nil {
		m.registry = prom.NewRegistry()
		m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m.registry.MustRegister(m)
	if !opts.NoClientGoMetrics {
		hookClientGo(m.runtime)
	}
	return m
}

// Handler returns the handler of the metrics' registry (Options.Registry): what
// manager.Options.MetricsHandler takes. A collector's error is reported in the response
// and the other metrics are served, as controller-runtime's metrics server does.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry returns the registry the metrics are registered in (Options.Registry, or the
// one New made), for a program's own metrics.
func (m *Metrics) Registry() *prom.Registry { return m.registry }

func (m *Metrics) collectors() []prom.Collector {
	return append([]prom.Collector{m.lists, m.listItems, m.listDuration, m.watchEvents, m.resourceVersion, m.errors,
		m.queueDepth, m.handlerDuration, m.handlerPanics, m.loopDepth, m.reconcileDuration, m.reconcileErrors, m.retries,
		m.shardsHeld, m.shardMoves, m.handOver, m.shardObjects, m.shardKeys,
		m.keysWaiting, m.writeWait, m.staleBoundHit, m.fence}, m.runtime.collectors()...)
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prom.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prom.Metric) {
	m.runtime.updateUnfinished()
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// QueueDepth implements typed.Metrics, and sets workqueue_depth.
func (m *Metrics) QueueDepth(loop string, depth int) {
	m.loopDepth.WithLabelValues(loop).Set(float64(depth))
	m.runtime.depth.WithLabelValues(loop, loop).Set(float64(depth))
}

// Retry implements typed.Metrics, and counts workqueue_retries_total.
func (m *Metrics) Retry(loop string) {
	m.retries.WithLabelValues(loop).Inc()
	m.runtime.retries.WithLabelValues(loop, loop).Inc()
}

// ReconcileLatency implements typed.Metrics, and observes
// controller_runtime_reconcile_time_seconds.
func (m *Metrics) ReconcileLatency(loop string, d time.Duration) {
	m.reconcileDuration.WithLabelValues(loop).Observe(d.Seconds())
	m.runtime.reconcileTime.WithLabelValues(loop).Observe(d.Seconds())
}

// KeysWaiting implements typed.ConsistencyMetrics.
func (m *Metrics) KeysWaiting(loop string, n int) {
	m.keysWaiting.WithLabelValues(loop).Set(float64(n))
}

// WriteWait implements typed.ConsistencyMetrics.
func (m *Metrics) WriteWait(loop string, d time.Duration) {
	m.writeWait.WithLabelValues(loop).Observe(d.Seconds())
}

// StaleBoundHit implements typed.ConsistencyMetrics.
func (m *Metrics) StaleBoundHit(loop string) { m.staleBoundHit.WithLabelValues(loop).Inc() }

// FenceDuration implements typed.ConsistencyMetrics.
func (m *Metrics) FenceDuration(loop string, d time.Duration) {
	m.fence.WithLabelValues(loop).Observe(d.Seconds())
}

// ReconcileError implements typed.Metrics.
func (m *Metrics) ReconcileError(loop string, terminal bool) {
	m.reconcileErrors.WithLabelValues(loop, strconv.FormatBool(terminal)).Inc()
}

// ShardsHeld implements shard.Metrics.
func (m *Metrics) ShardsHeld(group string, n int) {
	m.shardsHeld.WithLabelValues(group).Set(float64(n))
}

// ShardMoved implements shard.Metrics. A shard given up loses its objects and keys
// series, which would otherwise keep their last values.
func (m *Metrics) ShardMoved(group string, i int, gained bool) {
	if gained {
		m.shardMoves.WithLabelValues(group, "gained").Inc()
		return
	}
	m.shardMoves.WithLabelValues(group, "lost").Inc()
	m.shardObjects.DeleteLabelValues(group, strconv.Itoa(i))
	m.shardKeys.DeleteLabelValues(group, strconv.Itoa(i))
}

// HandOver implements shard.Metrics.
func (m *Metrics) HandOver(group string, _ int, d time.Duration) {
	m.handOver.WithLabelValues(group).Observe(d.Seconds())
}

// ShardObjects implements shard.Metrics.
func (m *Metrics) ShardObjects(group string, i int, n int) {
	m.shardObjects.WithLabelValues(group, strconv.Itoa(i)).Set(float64(n))
}

// ShardKeys implements shard.Metrics.
func (m *Metrics) ShardKeys(group string, i int, n int) {
	m.shardKeys.WithLabelValues(group, strconv.Itoa(i)).Set(float64(n))
}

// Listed implements controller.Metrics.
func (m *Metrics) Listed(controller string, items int, d time.Duration) {
	m.lists.WithLabelValues(controller).Inc()
	m.listItems.WithLabelValues(controller).Set(float64(items))
	m.listDuration.WithLabelValues(controller).Observe(d.Seconds())
}

// WatchEvent implements controller.Metrics.
func (m *Metrics) WatchEvent(controller string, t watch.EventType) {
	m.watchEvents.WithLabelValues(controller, string(t)).Inc()
}

// ResourceVersion implements controller.Metrics. Resource versions are opaque strings;
// the gauge is set only when one is an unsigned integer, as kube-apiserver's (etcd
// revisions) are.
func (m *Metrics) ResourceVersion(controller, rv string) {
	if n, err := strconv.ParseUint(rv, 10, 64); err == nil {
		m.resourceVersion.WithLabelValues(controller).Set(float64(n))
	}
}

// ListWatchError implements controller.Metrics.
func (m *Metrics) ListWatchError(controller string) { m.errors.WithLabelValues(controller).Inc() }

// EventQueueDepth implements controller.Metrics.
func (m *Metrics) EventQueueDepth(controller string, keys int) {
	m.queueDepth.WithLabelValues(controller).Set(float64(keys))
}

// HandlerLatency implements controller.Metrics.
func (m *Metrics) HandlerLatency(controller, handler string, d time.Duration) {
	m.handlerDuration.WithLabelValues(controller, handler).Observe(d.Seconds())
}

// HandlerPanic implements controller.Metrics.
func (m *Metrics) HandlerPanic(controller, handler string) {
	m.handlerPanics.WithLabelValues(controller, handler).Inc()
}
