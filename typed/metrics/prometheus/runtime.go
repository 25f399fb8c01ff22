package prometheus

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	clientle "k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/typed"
)

// reconcileBuckets are controller-runtime's buckets of controller_runtime_reconcile_time_seconds.
var reconcileBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
	1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60}

// queueBuckets are client-go's and controller-runtime's buckets of the workqueue's
// durations: 10ns to 1000s, by tens.
var queueBuckets = prom.ExponentialBuckets(10e-9, 10, 12)

// runtimeMetrics are the metrics of controller-runtime's names and labels, so that its
// dashboards and alerts work unchanged. A loop's name is its "controller", and its
// queue's "name" and "controller".
type runtimeMetrics struct {
	reconcileTotal  *prom.CounterVec
	reconcileErrors *prom.CounterVec
	terminalErrors  *prom.CounterVec
	panics          *prom.CounterVec
	reconcileTime   *prom.HistogramVec
	maxConcurrent   *prom.GaugeVec
	activeWorkers   *prom.GaugeVec

	depth         *prom.GaugeVec
	adds          *prom.CounterVec
	queueDuration *prom.HistogramVec
	workDuration  *prom.HistogramVec
	unfinished    *prom.GaugeVec
	longest       *prom.GaugeVec
	retries       *prom.CounterVec

	// inFlight holds, by loop, the start of each key's work under way, for unfinished
	// and longest, which Collect computes.
	mu       sync.Mutex
	inFlight map[string]map[time.Time]int

	// Client-go's: the process's (see clientGo).
	restRequests *prom.CounterVec
	leader       *prom.GaugeVec
	clientGo     bool
}

func newRuntimeMetrics(labels prom.Labels, clientGo bool) *runtimeMetrics {
	counter := func(name, help string, l ...string) *prom.CounterVec {
		return prom.NewCounterVec(prom.CounterOpts{Name: name, Help: help, ConstLabels: labels}, l)
	}
	gauge := func(name, help string, l ...string) *prom.GaugeVec {
		return prom.NewGaugeVec(prom.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, l)
	}
	histogram := func(name, help string, buckets []float64, l ...string) *prom.HistogramVec {
		return prom.NewHistogramVec(prom.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets}, l)
	}
	return &runtimeMetrics{
		reconcileTotal:  counter("controller_runtime_reconcile_total", "Total number of reconciliations per controller", "controller", "result"),
		reconcileErrors: counter("controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller", "controller"),
		terminalErrors:  counter("controller_runtime_terminal_reconcile_errors_total", "Total number of terminal reconciliation errors per controller", "controller"),
		panics:          counter("controller_runtime_reconcile_panics_total", "Total number of reconciliation panics per controller", "controller"),
		reconcileTime:   histogram("controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller", reconcileBuckets, "controller"),
		maxConcurrent:   gauge("controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent reconciles per controller", "controller"),
		activeWorkers:   gauge("controller_runtime_active_workers", "Number of currently used workers per controller", "controller"),

		depth:         gauge("workqueue_depth", "Current depth of workqueue", "name", "controller"),
		adds:          counter("workqueue_adds_total", "Total number of adds handled by workqueue", "name", "controller"),
		queueDuration: histogram("workqueue_queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested", queueBuckets, "name", "controller"),
		workDuration:  histogram("workqueue_work_duration_seconds", "How long in seconds processing an item from workqueue takes.", queueBuckets, "name", "controller"),
		unfinished: gauge("workqueue_unfinished_work_seconds", "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. "+
			"Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.", "name", "controller"),
		longest: gauge("workqueue_longest_running_processor_seconds", "How many seconds has the longest running processor for workqueue been running.", "name", "controller"),
		retries: counter("workqueue_retries_total", "Total number of retries handled by workqueue", "name", "controller"),

		inFlight: map[string]map[time.Time]int{},

		restRequests: counter("rest_client_requests_total", "Number of HTTP requests, partitioned by status code, method, and host.", "code", "method", "host"),
		leader: gauge("leader_election_master_status", "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. "+
			"'name' is the string used to identify the lease. Please make sure to group by name.", "name"),
		clientGo: clientGo,
	}
}

func (r *runtimeMetrics) collectors() []prom.Collector {
	cs := []prom.Collector{r.reconcileTotal, r.reconcileErrors, r.terminalErrors, r.panics, r.reconcileTime, r.maxConcurrent,
		r.activeWorkers, r.depth, r.adds, r.queueDuration, r.workDuration, r.unfinished, r.longest, r.retries}
	if r.clientGo {
		cs = append(cs, r.restRequests, r.leader)
	}
	return cs
}

// updateUnfinished sets the unfinished-work and longest-running gauges from the work
// under way, as client-go's workqueue does every half second; here, at each scrape.
func (r *runtimeMetrics) updateUnfinished() {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for loop, starts := range r.inFlight {
		var total, longest float64
		for start, n := range starts {
			d := now.Sub(start).Seconds()
			total += d * float64(n)
			longest = max(longest, d)
		}
		r.unfinished.WithLabelValues(loop, loop).Set(total)
		r.longest.WithLabelValues(loop, loop).Set(longest)
	}
}

// Workers implements typed.WorkMetrics: it sets the loop's
// controller_runtime_max_concurrent_reconciles and, as controller-runtime does when a
// controller starts, makes every series of the loop exist at zero.
func (m *Metrics) Workers(loop string, n int) {
	r := m.runtime
	r.maxConcurrent.WithLabelValues(loop).Set(float64(n))
	r.activeWorkers.WithLabelValues(loop).Add(0)
	for _, result := range []string{"success", "error", "requeue", "requeue_after"} {
		r.reconcileTotal.WithLabelValues(loop, result).Add(0)
	}
	r.reconcileErrors.WithLabelValues(loop).Add(0)
	r.terminalErrors.WithLabelValues(loop).Add(0)
	r.panics.WithLabelValues(loop).Add(0)
	r.adds.WithLabelValues(loop, loop).Add(0)
	r.retries.WithLabelValues(loop, loop).Add(0)
	r.mu.Lock()
	if r.inFlight[loop] == nil {
		r.inFlight[loop] = map[time.Time]int{}
	}
	r.mu.Unlock()
}

// KeysQueued implements typed.WorkMetrics: workqueue_adds_total.
func (m *Metrics) KeysQueued(loop string, n int) {
	m.runtime.adds.WithLabelValues(loop, loop).Add(float64(n))
}

// WorkStarted implements typed.WorkMetrics: workqueue_queue_duration_seconds, and one
// more of controller_runtime_active_workers.
func (m *Metrics) WorkStarted(loop string, waited time.Duration, start time.Time) {
	r := m.runtime
	r.queueDuration.WithLabelValues(loop, loop).Observe(waited.Seconds())
	r.activeWorkers.WithLabelValues(loop).Inc()
	r.mu.Lock()
	starts := r.inFlight[loop]
	if starts == nil {
		starts = map[time.Time]int{}
		r.inFlight[loop] = starts
	}
	starts[start]++
	r.mu.Unlock()
}

// WorkDone implements typed.WorkMetrics: workqueue_work_duration_seconds, and one less
// of controller_runtime_active_workers.
func (m *Metrics) WorkDone(loop string, start time.Time) {
	r := m.runtime
	r.workDuration.WithLabelValues(loop, loop).Observe(time.Since(start).Seconds())
	r.activeWorkers.WithLabelValues(loop).Dec()
	r.mu.Lock()
	if starts := r.inFlight[loop]; starts != nil {
		if starts[start]--; starts[start] <= 0 {
			delete(starts, start)
		}
	}
	r.mu.Unlock()
}

// Reconciled implements typed.WorkMetrics: controller_runtime_reconcile_total by result
// ("success", "requeue_after" for a Result with RequeueAfter or RequeueAt, or "error"
// for a failure, terminal or not, and a panic; "requeue" stays at zero: controller-runtime
// counts there only its deprecated Result.Requeue, a rate-limited requeue without an
// error, which typed.Result does not have), and for a failure
// controller_runtime_reconcile_errors_total, with
// controller_runtime_terminal_reconcile_errors_total or
// controller_runtime_reconcile_panics_total. A reconcile interrupted by its loop
// stopping is not counted: the library does not see it as a failure.
func (m *Metrics) Reconciled(loop string, o typed.Outcome) {
	r := m.runtime
	switch o {
	case typed.Succeeded:
		r.reconcileTotal.WithLabelValues(loop, "success").Inc()
	case typed.RequeuedAfter:
		r.reconcileTotal.WithLabelValues(loop, "requeue_after").Inc()
	case typed.Failed, typed.FailedTerminal, typed.Panicked:
		r.reconcileTotal.WithLabelValues(loop, "error").Inc()
		r.reconcileErrors.WithLabelValues(loop).Inc()
		if o == typed.FailedTerminal {
			r.terminalErrors.WithLabelValues(loop).Inc()
		}
		if o == typed.Panicked {
			r.panics.WithLabelValues(loop).Inc()
		}
	}
}

// clientGo forwards client-go's process-wide metrics hooks (the rest client's requests,
// leader election's status), which take one adapter per process, to every Metrics made
// with them.
var clientGo struct {
	once  sync.Once
	sinks atomic.Pointer[[]*runtimeMetrics]
	mu    sync.Mutex // serializes additions to sinks
}

// hookClientGo registers the adapters with client-go, once per process, and adds r to
// the sinks they forward to.
func hookClientGo(r *runtimeMetrics) {
	clientGo.once.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{RequestResult: requestResult{}})
		clientle.SetProvider(leaderProvider{})
		if _, ok := clientmetrics.RequestResult.(requestResult); !ok {
			klog.Background().Info("client-go's rest client metrics were registered before typedinformer's Prometheus adapter; " +
				"rest_client_requests_total stays at zero (register these metrics once, with one adapter)")
		}
	})
	clientGo.mu.Lock()
	defer clientGo.mu.Unlock()
	var sinks []*runtimeMetrics
	if old := clientGo.sinks.Load(); old != nil {
		sinks = append(sinks, *old...)
	}
	sinks = append(sinks, r)
	clientGo.sinks.Store(&sinks)
}

func eachClientGoSink(f func(r *runtimeMetrics)) {
	if sinks := clientGo.sinks.Load(); sinks != nil {
		for _, r := range *sinks {
			f(r)
		}
	}
}

// requestResult is client-go's metrics.ResultMetric: rest_client_requests_total.
type requestResult struct{}

func (requestResult) Increment(_ context.Context, code, method, host string) {
	eachClientGoSink(func(r *runtimeMetrics) { r.restRequests.WithLabelValues(code, method, host).Inc() })
}

// leaderProvider is client-go's leaderelection.MetricsProvider:
// leader_election_master_status, 1 while this process holds the Lease named name.
type leaderProvider struct{}

func (leaderProvider) NewLeaderMetric() clientle.LeaderMetric { return leaderMetric{} }

type leaderMetric struct{}

func (leaderMetric) On(name string) {
	eachClientGoSink(func(r *runtimeMetrics) { r.leader.WithLabelValues(name).Set(1) })
}

func (leaderMetric) Off(name string) {
	eachClientGoSink(func(r *runtimeMetrics) { r.leader.WithLabelValues(name).Set(0) })
}

func (leaderMetric) SlowpathExercised(string) {}
