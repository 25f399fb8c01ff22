// Package prometheus exports the counters, gauges and histograms of typedinformer's
// controllers (controller.Metrics) and reconcile loops (typed.Metrics) to Prometheus.
//
// The library has no dependency on any metrics library; this adapter is a separate Go
// module, so that only programs that use it depend on Prometheus's client:
//
//	m := prometheus.New(prometheus.Options{})
//	registry.MustRegister(m)
//	mgr := manager.New(manager.Options{Metrics: m}) // every cache and loop of the Manager
//
// or, for a controller and a loop of one's own:
//
//	pods, err := controller.New(cs.CoreV1().Pods(ns), controller.Options[*corev1.Pod]{
//		Options: reflect.Options[*corev1.Pod]{Name: "pods"}, Metrics: m})
//	loop, err := typed.NewLoop(pods, reconciler, typed.Options{Name: "pods", Metrics: m})
//
// Metrics is a prometheus.Collector holding every metric vector, and the whole metrics
// family of the library (manager.Metrics: controller.Metrics and typed.Metrics; and
// shard.Metrics): every call names its controller, loop or shard group, which its samples
// carry as the "controller", "loop" or "group" label.
//
// With the default namespace "typedinformer", the metrics are:
//
//	typedinformer_reflector_lists_total{controller}                   counter
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
	"strconv"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/watch"

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
}

var (
	_ prom.Collector  = (*Metrics)(nil)
	_ manager.Metrics = (*Metrics)(nil)
	_ shard.Metrics   = (*Metrics)(nil)
)

// New returns the metrics, ready to be registered.
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
	return &Metrics{
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
	}
}

func (m *Metrics) collectors() []prom.Collector {
	return []prom.Collector{m.lists, m.listItems, m.listDuration, m.watchEvents, m.resourceVersion, m.errors,
		m.queueDepth, m.handlerDuration, m.handlerPanics, m.loopDepth, m.reconcileDuration, m.reconcileErrors, m.retries,
		m.shardsHeld, m.shardMoves, m.handOver, m.shardObjects, m.shardKeys}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prom.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prom.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// QueueDepth implements typed.Metrics.
func (m *Metrics) QueueDepth(loop string, depth int) {
	m.loopDepth.WithLabelValues(loop).Set(float64(depth))
}

// Retry implements typed.Metrics.
func (m *Metrics) Retry(loop string) { m.retries.WithLabelValues(loop).Inc() }

// ReconcileLatency implements typed.Metrics.
func (m *Metrics) ReconcileLatency(loop string, d time.Duration) {
	m.reconcileDuration.WithLabelValues(loop).Observe(d.Seconds())
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
