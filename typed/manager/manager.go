package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/webhook"
	"github.com/typedinformer/typedinformer/typed/write"
)

// DefaultShutdownTimeout is how long Run waits, when Options.ShutdownTimeout is zero,
// for runnables and caches to stop once its context has ended.
const DefaultShutdownTimeout = 30 * time.Second

// Runnable is anything the Manager runs: Run is called with a context that ends when the
// Manager stops (or, for a runnable that needs leader election, when leadership ends),
// and must return soon after. A non-nil error stops the Manager.
type Runnable interface {
	Run(ctx context.Context) error
}

// RunnableFunc adapts a plain function to a Runnable.
type RunnableFunc func(ctx context.Context) error

// Run calls f.
func (f RunnableFunc) Run(ctx context.Context) error { return f(ctx) }

// LeaderElectionRunnable is implemented by runnables that say whether they need leader
// election. A Runnable that does not implement it needs it, as in controller-runtime: by
// default nothing that may write runs on two replicas at once.
type LeaderElectionRunnable interface {
	NeedLeaderElection() bool
}

// EveryReplica returns r as a Runnable that runs on every replica, leader or not, for as
// long as the Manager runs: a metrics server, a cache warmer, a webhook.
func EveryReplica(r Runnable) Runnable { return everyReplica{r} }

type everyReplica struct{ Runnable }

func (everyReplica) NeedLeaderElection() bool { return false }

// Options configure a Manager. The zero value runs everything on this replica alone, with
// no probe server and a 30-second shutdown timeout.
type Options struct {
	// LeaderElection, when set, runs the runnables that need leader election (every
	// Loop, and by default every Runnable) only while this replica holds its Lease. Caches
	// run on every replica, so a new leader starts warm. Leadership lost (a renewal that
	// failed) stops them, their in-flight reconciles finished, and the replica campaigns
	// again: the runnables run once per term, so they must be runnable again after they
	// returned, as typed.Loop is. The Lease is released only once they have all returned.
	LeaderElection *leaderelection.Config
	// ShutdownTimeout bounds how long Run waits, once its context ended or a runnable
	// failed, for runnables to return and then caches to stop; DefaultShutdownTimeout when
	// zero, no bound when negative.
	ShutdownTimeout time.Duration
	// HealthProbeAddress, when set (":8081"), is where Run serves /healthz and /readyz
	// (see HealthzHandler and ReadyzHandler) until it returns.
	HealthProbeAddress string
	// HealthProbeListener, when set, is used instead of listening on HealthProbeAddress;
	// Run closes it when it returns. A typed nil counts as unset.
	HealthProbeListener net.Listener
	// MetricsAddress, when set (":8080"), is where Run serves MetricsHandler at /metrics
	// until it returns; nothing is served when it and MetricsListener are unset. Run
	// listens before it starts anything, so an address in use is Run's error, and stops
	// serving last, once the caches have stopped, letting scrapes in flight finish for a
	// few seconds. Run refuses an address or listener without a MetricsHandler.
	MetricsAddress string
	// MetricsListener, when set, is used instead of listening on MetricsAddress; Run
	// closes it when it returns. A typed nil counts as unset.
	MetricsListener net.Listener
	// MetricsHandler serves /metrics: the Prometheus adapter's Handler (module
	// github.com/typedinformer/typedinformer/typed/metrics/prometheus), or any
	// http.Handler. The Manager imports no metrics library. A typed nil counts as unset.
	MetricsHandler http.Handler
	// MetricsAuth, when set, authenticates and authorizes every request to the metrics
	// server through the API server, as controller-runtime's
	// filters.WithAuthenticationAndAuthorization does: the request's bearer token is
	// checked with a TokenReview (none, or one the server rejects: 401 Unauthorized),
	// then its user is checked with a SubjectAccessReview for the request's verb ("get")
	// on the non-resource URL of its path ("/metrics"; not allowed: 403 Forbidden). The
	// Manager's identity needs permission to create tokenreviews
	// (authentication.k8s.io) and subjectaccessreviews (authorization.k8s.io); a scraper
	// needs a rule such as nonResourceURLs ["/metrics"], verbs ["get"]. Decisions are kept
	// for MetricsAuthCacheTTL (allowed) or a tenth of it (refused), by token and path. It
	// needs a metrics server; a typed nil counts as unset. Serve the metrics server over
	// TLS (a TLS-terminating listener as MetricsListener) when tokens cross a network.
	MetricsAuth kubernetes.Interface
	// Pprof, when true, also serves net/http/pprof's profiles at /debug/pprof/ on the
	// metrics server, behind MetricsAuth when it is set (the path authorized is the
	// profile's, e.g. /debug/pprof/heap). It needs a metrics server.
	Pprof bool
	// Webhook, when set, is run on every replica while Run runs (a certificate that
	// cannot be loaded or a port in use is Run's error), and /readyz waits until it
	// listens with its certificate loaded. It starts before the caches and runnables and
	// stops after them, as the metrics server does: the writes of loops finishing (a
	// finalizer removed, say) may go through its webhooks. Register its webhooks with
	// webhook.For, or Server.Register, before or while it runs.
	Webhook *webhook.Server
	// NoWatchList, when true, makes every cache list its initial state (and each relist)
	// with paged lists. By default a cache streams it with the watch-list protocol
	// (controller.Options.WatchList): the server sends the objects as watch events,
	// decoded one at a time instead of list pages held whole, so that a sync's peak memory
	// is the cache's rather than twice it (see the README's benchmarks). Either way the
	// read is consistent (DESIGN 19). A cache lists instead, with no option, on a server
	// that refuses watch-list, over a client that says it cannot serve it (client-go's
	// fake clientset, dynamic and metadata fakes, the typed clients of any generated fake
	// clientset: see reflect.WatchListUnsupported; a Source's own ListerWatcher says so
	// by implementing IsWatchListSemanticsUnSupported() bool), and after a stream whose
	// initial events stalled for reflect.WatchListStall (reported as
	// reflect.ErrWatchListStalled).
	NoWatchList bool
	// KeepManagedFields, when true, keeps metadata.managedFields in the objects the
	// caches hold. By default a cache drops them (client.StripManagedFields, before
	// CacheOptions.Transform): they are often most of an object's size, controllers
	// rarely read them, and server-side apply needs none of them on the client. Over a
	// client.Dynamic (client.ForResource, client.FromREST, client.FromDynamic) they are
	// not even decoded (client.Dynamic.WithoutManagedFields). Read them, when a program
	// must, with a Get.
	KeepManagedFields bool
	// NoStringInterning, when true, keeps every cached object's strings its own. By default
	// a cache makes the strings that objects repeat (labels, namespaces, owner
	// references, image names; see client.InternStrings) share one copy, before
	// CacheOptions.Transform: a cached Pod then costs a fraction of the memory, for a few
	// microseconds of CPU per object received.
	NoStringInterning bool
	// ResyncPeriod, when positive, makes every cache redeliver each object that has
	// nothing pending to its handlers and loops that often (controller.Options.ResyncPeriod).
	ResyncPeriod time.Duration
	// Metrics, when set, receives the counters and gauges of every shared cache's
	// controller (named as Cache.Name names it; a cache of several namespaces has one per
	// namespace) and of every Loop made through the Manager whose typed.Options.Metrics is
	// nil. A panic in it is recovered and logged.
	Metrics Metrics
	// CustomResourceDefinitions, when set, lets a cache whose resource the server stops
	// serving (its CustomResourceDefinition deleted, or not installed yet) learn at once
	// that it is served again, by watching the CustomResourceDefinition that its Source's
	// GroupVersionResource names (see Cache.Err); it needs permission to list and watch
	// customresourcedefinitions. Without it, or for a Source without a
	// GroupVersionResource, the cache checks on ResourceBackoff's schedule only.
	CustomResourceDefinitions CRDClient
	// InstallCRDs, when set, installs or upgrades CustomResourceDefinitions built from Go
	// types before Run starts any cache or runnable (see CRDInstall).
	InstallCRDs *CRDInstall
	// ResourceBackoff spaces the checks (one list each) of a cache whose resource the
	// server does not serve, until it is served again; DefaultResourceBackoff when its
	// Duration is zero.
	ResourceBackoff wait.Backoff
	// DetectMutations turns on the mutation detector of every cache, for tests (see
	// controller.Options.DetectMutations; the environment variable
	// controller.MutationDetectorEnv does the same for every controller of a test binary).
	// Each cached object found changed in place, a bug of the reconciler, handler or
	// reader that changed it, is logged at error level, given to OnMutation, and returned
	// by Run, wrapped with its cache's name (errors.As finds the
	// *eventcache.MutationError), though it does not stop the Manager.
	DetectMutations bool
	// OnMutation, when set, is called with each mutation the detector finds, as it is
	// found, and the name of its cache: a test can fail at once. It must not block; a
	// panic in it is recovered and logged.
	OnMutation func(cache string, err *eventcache.MutationError)
	// FieldManager is the field manager that the server-side applies of everything the
	// Manager runs are made as (write.Applier, write.OwnedApplier), carried to them by
	// the context (write.WithFieldManager); a writer given one of its own uses its own.
	// Every replica of a program must use the same name, or a new leader's applies would
	// conflict with the old leader's fields: so it defaults to the program's base name
	// (os.Args[0], as client-go derives its default user agent), not to a replica's
	// identity, and is "typedinformer" when that is empty. Name it when several programs
	// share a binary name.
	FieldManager string
}

// Metrics is the family of metrics a Manager reports: its caches' controllers' (and
// their reflectors') and its loops' (with typed.WorkMetrics and typed.ConsistencyMetrics
// when it implements them, which each Loop checks for). Every method carries the name of the controller or
// loop it is about, and no two interfaces of the family share a method name, so one
// type implements it all and serves every cache and loop, given once as
// Options.Metrics. The same type can implement shard.Metrics too, for a Sharder (which
// the Manager does not make). The Prometheus adapter of module
// github.com/typedinformer/typedinformer/typed/metrics/prometheus is one.
type Metrics interface {
	controller.Metrics
	typed.Metrics
}

type state int

const (
	idle     state = iota
	starting       // Run serves the probes; what is acquired or added waits for running
	running        // caches and runnables start
	stopping       // runnables are stopping; caches still run
	stopped        // caches are stopping or stopped
)

type runnable struct {
	name   string
	r      Runnable
	leader bool
	// handOver, when set, runs r in a term of leadership instead of r.Run, with the
	// term's held context (see leaderelection.Config.RunHandingOver).
	handOver func(ctx, held context.Context) error
}

// term is one term of leadership: the runnables that need leader election run in it.
type term struct {
	ctx  context.Context
	held context.Context // nil without leader election
	wg   sync.WaitGroup
}

// Manager runs shared caches, reconcile loops and the program's own runnables together,
// with leader election, health probes and a graceful shutdown. Create it with New, get
// caches with Acquire, add loops with NewLoop and runnables with Add, then call Run.
type Manager struct {
	opts Options

	// indexMu serializes the addition of indexes to shared caches (entry.indexes). It is
	// never held with mu.
	indexMu sync.Mutex

	mu        sync.Mutex
	state     state
	stoppedCh chan struct{}       // closed when state becomes stopped
	entries   map[cacheKey]*entry // the shared caches, by key
	private   uint64              // the last key given to a cache that is never shared
	// cacheCtx is the context of the caches while Run runs: it outlives the runnables'.
	cacheCtx  context.Context
	caches    sync.WaitGroup // cache goroutines
	runnables []*runnable
	runCtx    context.Context // of the runnables that run on every replica
	cancelRun context.CancelCauseFunc
	every     sync.WaitGroup // runnables that run on every replica
	term      *term          // the current term of leadership, nil when not leading
	active    map[string]int // runnables running, by name, for the shutdown timeout's error
	ended     bool           // Run has returned
	errs      []error
	mutations int // found by the caches' detectors; the first maxKeptMutations are in errs
	loops     []*loopNeeds
	checks    map[probe][]namedCheck
}

// New returns a Manager with opts, ready to Run.
func New(opts Options) *Manager {
	m := &Manager{
		opts:      opts,
		stoppedCh: make(chan struct{}),
		entries:   map[cacheKey]*entry{},
		active:    map[string]int{},
		checks:    map[probe][]namedCheck{},
	}
	if opts.Webhook != nil {
		m.checks[readiness] = append(m.checks[readiness], namedCheck{"webhook server", opts.Webhook.Ready})
	}
	return m
}

// FieldManager returns the field manager the Manager's runnables apply as (see
// Options.FieldManager).
func (m *Manager) FieldManager() string {
	if m == nil {
		return ""
	}
	return fieldManager(m.opts.FieldManager, os.Args)
}

// fieldManager returns name, or else the base name of the program args[0] names, as a
// valid field manager (at most 128 printable characters).
func fieldManager(name string, args []string) string {
	if name == "" && len(args) > 0 {
		name = filepath.Base(args[0])
		if name == "." || name == string(filepath.Separator) {
			name = ""
		}
	}
	name = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, name)
	if r := []rune(name); len(r) > 128 {
		name = string(r[:128])
	}
	if name == "" {
		return "typedinformer"
	}
	return name
}

// Add registers r under name (used in logs and errors). It runs, on a goroutine of its
// own, while this replica leads, or for as long as the Manager runs when it does not need
// leader election (see LeaderElectionRunnable, EveryReplica). Added while the Manager
// runs, it starts at once (when it needs leader election: at once if this replica leads,
// else in its next term). A panic in r is recovered and stops the Manager as an error
// (*PanicError) would. Add returns an error wrapping controller.ErrNilArgument for a nil r, and
// ErrStopped once the Manager is stopping.
func (m *Manager) Add(name string, r Runnable) error {
	if m == nil {
		return fmt.Errorf("%w: Add's manager", controller.ErrNilArgument)
	}
	inner := r
	if e, ok := r.(everyReplica); ok {
		inner = e.Runnable
	}
	if guard.IsNil(inner) {
		return fmt.Errorf("%w: runnable %q", controller.ErrNilArgument, name)
	}
	leader, err := needsLeader(name, r)
	if err != nil {
		return err
	}
	return m.add(&runnable{name: name, r: r, leader: leader})
}

// needsLeader asks r whether it needs leader election, recovering a panic.
func needsLeader(name string, r Runnable) (leader bool, err error) {
	l, ok := r.(LeaderElectionRunnable)
	if !ok {
		return true, nil
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("runnable %q: NeedLeaderElection panicked: %v", name, v)
		}
	}()
	return l.NeedLeaderElection(), nil
}

func (m *Manager) add(rn *runnable) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state >= stopping {
		return ErrStopped
	}
	m.runnables = append(m.runnables, rn)
	switch {
	case m.state != running:
	case !rn.leader:
		m.startLocked(m.runCtx, nil, &m.every, rn)
	case m.term != nil:
		m.startLocked(m.term.ctx, m.term.held, &m.term.wg, rn)
	}
	return nil
}

// startLocked runs rn on a goroutine counted by wg, with the term's held context if
// any. Called with m.mu held.
func (m *Manager) startLocked(ctx, held context.Context, wg *sync.WaitGroup, rn *runnable) {
	wg.Add(1)
	m.active[rn.name]++
	go func() {
		defer wg.Done() // last, so that waiting for wg waits for the error too
		err := call(ctx, held, rn)
		m.mu.Lock()
		if m.active[rn.name]--; m.active[rn.name] == 0 {
			delete(m.active, rn.name)
		}
		m.mu.Unlock()
		if err != nil {
			m.fail(ctx, err)
		}
	}()
}

// call runs rn, turning a panic into a *PanicError.
func call(ctx, held context.Context, rn *runnable) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &controller.PanicError{Kind: "runnable", Name: rn.name, Value: v, Stack: debug.Stack()}
		}
	}()
	run := rn.r.Run
	if held != nil && rn.handOver != nil {
		run = func(ctx context.Context) error { return rn.handOver(ctx, held) }
	}
	if err := run(ctx); err != nil {
		return fmt.Errorf("runnable %q: %w", rn.name, err)
	}
	return nil
}

// stopping reports whether m is shutting down, or has stopped: from the end of Run's
// context (or a runnable's failure), which the runnables see before Run's shutdown.
func (m *Manager) stopping() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state >= stopping || (m.runCtx != nil && m.runCtx.Err() != nil)
}

// logger returns the logger of Run's context, or klog's background logger before Run.
func (m *Manager) logger() klog.Logger {
	m.mu.Lock()
	ctx := m.cacheCtx
	m.mu.Unlock()
	if ctx == nil {
		return klog.Background()
	}
	return klog.FromContext(ctx)
}

// maxKeptMutations bounds the mutations Run keeps to return: a reconciler that changes
// its object in every reconcile must not grow the Manager's memory for as long as it runs.
const maxKeptMutations = 1000

// mutation records a cached object changed in place, for Run to return, and hands it to
// Options.OnMutation. The controller has logged it, through OnError.
func (m *Manager) mutation(ctx context.Context, cache string, err *eventcache.MutationError) {
	m.mu.Lock()
	if m.mutations++; m.mutations <= maxKeptMutations {
		m.errs = append(m.errs, fmt.Errorf("cache %s: %w", cache, err))
	}
	m.mu.Unlock()
	if m.opts.OnMutation != nil {
		defer guard.LogPanic(klog.FromContext(ctx), err, "Options.OnMutation panicked", "cache", cache)
		m.opts.OnMutation(cache, err)
	}
}

// fail records err, logs it at error level, and stops the Manager.
func (m *Manager) fail(ctx context.Context, err error) {
	logger := klog.FromContext(ctx)
	var p *controller.PanicError
	if errors.As(err, &p) {
		logger.Error(err, "runnable panicked; stopping the manager", "runnable", p.Name, "stack", string(p.Stack))
	} else {
		logger.Error(err, "stopping the manager")
	}
	m.mu.Lock()
	m.errs = append(m.errs, err)
	cancel := m.cancelRun
	m.mu.Unlock()
	cancel(err)
}

// Run runs the Manager until ctx ends or a runnable fails: it serves the health probes
// and the metrics (listening on both before it starts anything else), installs
// Options.InstallCRDs (an install that fails ends Run with its error, and one that ctx
// ends, with nil), then starts every cache acquired so far (and every cache acquired
// later, as it is acquired), the runnables that run on every replica, and leader
// election, whose terms run the loops and the other runnables.
//
// Then it shuts down gracefully: it ends the runnables' contexts (loops stop taking keys
// and let in-flight reconciles finish; while leading, they then reconcile the deletions
// they have queued, which the next leader's cache cannot show, for the election's
// RenewDeadline at most), waits for them to return and for leader election to release
// the Lease, then stops the caches, the probe server and the metrics server. It returns nil after a
// clean stop, or every runnable's error joined (a panic as *PanicError), each wrapped with
// the runnable's name. It returns no later than Options.ShutdownTimeout after the
// shutdown began, with an error wrapping ErrShutdownTimeout that names what still ran:
// their goroutines are left behind, and while leading, the Lease is renewed until they
// return so that no other replica leads meanwhile; the program should exit. Otherwise Run
// leaves no goroutine behind. It returns an error wrapping controller.ErrAlreadyRunning when called again.
func (m *Manager) Run(ctx context.Context) error {
	if m == nil {
		return fmt.Errorf("%w: Run's manager", controller.ErrNilArgument)
	}
	logger := klog.FromContext(ctx)
	m.mu.Lock()
	if m.state != idle {
		m.mu.Unlock()
		return fmt.Errorf("manager: %w", controller.ErrAlreadyRunning)
	}
	m.state = starting
	runCtx, cancel := context.WithCancelCause(write.WithFieldManager(ctx, m.FieldManager()))
	defer cancel(nil)
	// The caches outlive the runnables, which read them while they finish.
	cacheCtx, stopCaches := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCaches()
	m.runCtx, m.cancelRun, m.cacheCtx = runCtx, cancel, cacheCtx
	m.mu.Unlock()

	probes, metrics, err := m.serveAll(ctx)
	if err == nil {
		if err = m.installCRDs(ctx); err != nil {
			probes.stop()
			metrics.stop()
		}
	}
	if err != nil {
		m.mu.Lock()
		m.state = stopped
		m.ended = true
		close(m.stoppedCh)
		m.mu.Unlock()
		if ctx.Err() != nil {
			return nil // ended while installing CRDs: a shutdown, not a failure
		}
		return err
	}
	stopWebhooks := m.serveWebhooks(ctx)
	// What Acquire and Add registered until now, meanwhile included, starts here, under
	// the same lock as the change of state: after it, they start what they register.
	m.mu.Lock()
	m.state = running
	for _, e := range m.entries {
		m.startEntryLocked(e)
	}
	for _, rn := range m.runnables {
		if !rn.leader {
			m.startLocked(runCtx, nil, &m.every, rn)
		}
	}
	m.mu.Unlock()
	leaderDone := make(chan struct{})
	go func() {
		defer close(leaderDone)
		m.runLeader(runCtx)
	}()
	logger.Info("manager started", "leaderElection", m.opts.LeaderElection != nil)

	<-runCtx.Done()
	return m.shutdown(ctx, stopCaches, leaderDone, probes, metrics, stopWebhooks)
}

// serveWebhooks runs Options.Webhook, if set, until the function it returns is called;
// its failure is a failure of the Manager.
func (m *Manager) serveWebhooks(ctx context.Context) (stop func()) {
	srv := m.opts.Webhook
	if srv == nil {
		return func() {}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Run(wctx); err != nil {
			m.fail(ctx, fmt.Errorf("webhook server: %w", err))
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// runLeader runs the runnables that need leader election: in every term of leadership,
// or once for as long as ctx lasts without leader election.
func (m *Manager) runLeader(ctx context.Context) {
	le := m.opts.LeaderElection
	if le == nil {
		m.lead(ctx, nil)
		return
	}
	if err := le.RunHandingOver(ctx, m.lead); err != nil {
		m.fail(ctx, fmt.Errorf("leader election: %w", err))
	}
}

// lead runs one term: it starts the runnables that need leader election, and returns once
// the term has ended and they have all returned, so that the Lease is released only then.
// held, nil without leader election, lasts while the Lease is held after the term.
func (m *Manager) lead(ctx, held context.Context) {
	t := &term{ctx: ctx, held: held}
	m.mu.Lock()
	if m.state != running {
		m.mu.Unlock()
		return
	}
	m.term = t
	for _, rn := range m.runnables {
		if rn.leader {
			m.startLocked(ctx, held, &t.wg, rn)
		}
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.term = nil
	m.mu.Unlock()
	t.wg.Wait()
}

// shutdown stops the runnables, then the caches, then the webhook and probe servers,
// within the shutdown timeout, and returns Run's error.
func (m *Manager) shutdown(ctx context.Context, stopCaches context.CancelFunc, leaderDone <-chan struct{}, probes, metrics *server, stopWebhooks func()) error {
	logger := klog.FromContext(ctx)
	m.mu.Lock()
	m.state = stopping
	m.mu.Unlock()
	timeout := m.opts.ShutdownTimeout
	if timeout == 0 {
		timeout = DefaultShutdownTimeout
	}
	logger.Info("manager shutting down", "timeout", timeout)
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	var late []string
	runnablesDone := waitAll(m.every.Wait, func() { <-leaderDone })
	select {
	case <-runnablesDone:
	case <-expired:
		late = m.stillRunning(leaderDone)
	}

	m.mu.Lock()
	m.state = stopped
	close(m.stoppedCh)
	stopCaches()
	m.mu.Unlock()
	if late == nil {
		select {
		case <-waitAll(m.caches.Wait):
		case <-expired:
			late = []string{"caches"}
		}
	}
	stopWebhooks() // after the runnables, whose last writes may need them
	probes.stop()
	metrics.shutdown(metricsShutdownTimeout) // last: scrapes see the whole shutdown

	m.mu.Lock()
	errs := slices.Clone(m.errs)
	if n := m.mutations - maxKeptMutations; n > 0 {
		errs = append(errs, fmt.Errorf("%d more cached objects found changed in place (reported, not kept)", n))
	}
	m.ended = true
	m.mu.Unlock()
	if late != nil {
		err := fmt.Errorf("%w after %v: still running: %q", ErrShutdownTimeout, timeout, late)
		logger.Error(err, "manager stopped, leaving goroutines behind")
		errs = append(errs, err)
	} else {
		logger.Info("manager stopped")
	}
	return errors.Join(errs...)
}

// stillRunning names the runnables that have not returned.
func (m *Manager) stillRunning(leaderDone <-chan struct{}) []string {
	m.mu.Lock()
	late := slices.Sorted(maps.Keys(m.active))
	m.mu.Unlock()
	select {
	case <-leaderDone:
	default:
		if len(late) == 0 {
			late = append(late, "leader election")
		}
	}
	return late
}

// waitAll returns a channel closed once every wait has returned. Its goroutine outlives
// a shutdown that timed out, until the waits return.
func waitAll(waits ...func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, wait := range waits {
			wait()
		}
	}()
	return done
}

// server is an HTTP server Run runs, the probes' or the metrics'; a nil one serves
// nothing.
type server struct {
	srv  *http.Server
	done chan struct{}
}

// listen returns l, or a listener on address when l is nil or a typed nil, or nil when
// both are unset.
func listen(l net.Listener, address string) (net.Listener, error) {
	if guard.IsNil(l) {
		l = nil // a typed nil is none, not a listener to call
	}
	if l != nil || address == "" {
		return l, nil
	}
	return net.Listen("tcp", address)
}

// serve serves h on l until stop, reporting a failure to serve as a failure of the
// Manager.
func (m *Manager) serve(ctx context.Context, what string, l net.Listener, h http.Handler) *server {
	s := &server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	klog.FromContext(ctx).Info("serving "+what, "address", l.Addr().String())
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			m.fail(ctx, fmt.Errorf("%s server: %w", what, err))
		}
	}()
	return s
}

// serveProbes starts serving /healthz and /readyz, if the options ask for it.
func (m *Manager) serveProbes(ctx context.Context) (*server, error) {
	l, err := listen(m.opts.HealthProbeListener, m.opts.HealthProbeAddress)
	if err != nil {
		return nil, fmt.Errorf("serving health probes: %w", err)
	}
	if l == nil {
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz", m.HealthzHandler())
	mux.Handle("/readyz", m.ReadyzHandler())
	return m.serve(ctx, "health probes", l, mux), nil
}

// stop closes the server at once, ending the requests in flight.
func (s *server) stop() {
	if s == nil {
		return
	}
	_ = s.srv.Close()
	<-s.done
}

// shutdown stops the server gracefully: it stops listening, lets the requests in flight
// finish for up to timeout, then closes what is left.
func (s *server) shutdown(timeout time.Duration) {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
