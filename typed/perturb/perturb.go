package perturb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/crd"
)

// Env is the cluster as a controller under test, or a scenario's step, sees it: clients of
// the in-memory API server and the clock the controller is to read (typed.Options.Clock).
// The controller's clients are counted and can crash; a step's are never perturbed.
type Env struct {
	// Clientset serves the built-in kinds, Dynamic every kind (Options.Definitions' too).
	Clientset kubernetes.Interface
	Dynamic   dynamic.Interface
	// Clock starts at Options.Start in every run; only steps move it.
	Clock *clocktesting.FakeClock
	// Namespace is the run's: "default" in memory, a fresh one on a Server.
	Namespace string
}

// Controller runs one process of the controller under test on env until ctx ends, as its
// main does: it builds its caches and loops with env's clients and clock and runs them.
// A crash cancels ctx and refuses every later request of that process; Controller must
// then return, and is called again for the fresh process.
type Controller func(ctx context.Context, env Env) error

// Step is one change of desired state of a scenario, made as a user or another
// controller would: through env's clients, or by stepping env.Clock. The harness waits
// until the controller is quiet after each step.
type Step struct {
	Name string
	Do   func(ctx context.Context, env Env) error
}

// Class is a class of perturbation (the three of Sieve's bug classes).
type Class int

const (
	// Crash stops the controller process right after its write N (its Lease, if any,
	// not released) and starts a fresh one, with new caches, on the same cluster.
	Crash Class = iota
	// Stale makes the watches of one resource lag: from the controller's write N they
	// deliver nothing newer until a number of changes later (or a while later), as a
	// lagging watch cache would. Lists stay consistent reads, as read-your-writes
	// relies on.
	Stale
	// Unobserved disconnects the watches of one resource before a step: the changes made
	// meanwhile are never delivered, and when it comes back its resource version is too
	// old (410 Gone), so the caches relist and see only the final state.
	Unobserved
)

var classNames = [...]string{Crash: "crash", Stale: "stale reads", Unobserved: "unobserved states"}

func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return fmt.Sprintf("Class(%d)", int(c))
	}
	return classNames[c]
}

// Options bound and shape a Check. The zero value checks every class within the default
// budget.
type Options struct {
	// Definitions are the custom resources the controller and the steps use (as for
	// testenv); built-in kinds need none.
	Definitions []*crd.Definition
	// Compare lists the resources whose objects are compared at the end of a run; every
	// resource written in the run but Leases and Events when empty.
	Compare []schema.GroupVersionResource
	// Nondeterministic are field paths (such as {"status", "lastScheduleTime"}) removed
	// from every object before comparing; a list on a path has the rest of the path
	// removed from each of its items ({"status", "active", "uid"}). The server's own (resourceVersion, uid,
	// creationTimestamp, generation, managedFields, owner references' UIDs) and the
	// conditions' lastTransitionTime are always removed, and a generated name compares
	// as its generateName and rank.
	Nondeterministic [][]string
	// Classes are the perturbations tried (all when empty).
	Classes []Class
	// Runs bounds the perturbed runs (60 when zero): when the scenario offers more, each
	// class gets its share, sampled with Seed.
	Runs int
	// Budget bounds the time of the whole Check (2 minutes when zero); the runs it
	// leaves out are counted in Report.Skipped.
	Budget time.Duration
	// Seed chooses the sample when not every perturbation fits into Runs.
	Seed uint64
	// Replay, when set, runs only the perturbation of that seed (a Failure's Seed).
	Replay *uint64
	// Quiet is how long the cluster must see no change before the controller counts as
	// settled (200ms when zero).
	Quiet time.Duration
	// Window is how long a lag or a disconnection lasts at most, if the changes it
	// counts do not end it first (4×Quiet when zero): longer than Quiet, so that the
	// next step comes while the controller's view is still stale.
	Window time.Duration
	// StepTimeout bounds the wait for the controller to settle (30s when zero).
	StepTimeout time.Duration
	// Start is the clock's time at the start of every run (2026-01-01T00:00:00Z when
	// zero).
	Start time.Time
	// Server, when set, runs every run on that API server (typed/testenv's
	// AdminConfig) instead of in memory, each in a namespace of its own (Env.Namespace,
	// left behind: without kube-controller-manager nothing would empty it), comparing
	// the resources written in it. Every class runs there, the reads perturbed at the
	// process's transport (see the package doc). Definitions are not needed (install
	// the CRDs with the server); a run costs a real Lease expiry after each crash, and Quiet
	// must cover what the server takes to answer (a new leader's consistent read waits
	// about a second for kube-apiserver's bookmark, longer when one does not come):
	// the Website's test takes 3s. Writes a crashed process had in flight still land.
	Server *rest.Config
}

// Perturbation says what one perturbed run did; Seed alone replays it.
type Perturbation struct {
	Class Class
	// Seed replays this perturbation (Options.Replay).
	Seed uint64
	// Write is the write after which the controller crashed or the lag began (from 1).
	Write int
	// WriteDesc is that write in the reference run: verb, resource, namespace/name.
	WriteDesc string
	// Step is the step before which the disconnection began (from 0).
	Step int
	// Resource is the resource whose watches lagged or were disconnected.
	Resource schema.GroupVersionResource
	// Events is how many changes of Resource the window lasted, at most.
	Events int
}

func (p Perturbation) String() string {
	switch p.Class {
	case Crash:
		return fmt.Sprintf("crash after write %d (%s) [seed %d]", p.Write, p.WriteDesc, p.Seed)
	case Stale:
		return fmt.Sprintf("watches of %s lag by up to %d changes from write %d (%s) [seed %d]", p.Resource, p.Events, p.Write, p.WriteDesc, p.Seed)
	default:
		return fmt.Sprintf("watches of %s disconnected before step %d for up to %d changes [seed %d]", p.Resource, p.Step, p.Events, p.Seed)
	}
}

// Failure is a perturbed run whose end state differs from the reference's, or that did
// not end well (Err).
type Failure struct {
	Perturbation
	// Diff is go-cmp's Diff(reference, perturbed) of the compared objects by resource and key.
	Diff string
	// NotReached says that the run ended before the controller made the write the
	// perturbation waited for: the run was never perturbed, and differs because the
	// controller did less than in the reference run, which points to a controller
	// slower to react than Options.Quiet rather than to a perturbation.
	NotReached bool
	// Err is why the run could not be compared: a step that failed, a controller that
	// returned an error or did not stop, a cluster that did not settle.
	Err error
}

func (f Failure) String() string {
	if f.Err != nil {
		return fmt.Sprintf("%v: %v", f.Perturbation, f.Err)
	}
	if f.NotReached {
		return fmt.Sprintf("%v: write %d never came (is Options.Quiet shorter than the controller takes to react?); end state differs (-reference +perturbed):\n%s", f.Perturbation, f.Write, f.Diff)
	}
	return fmt.Sprintf("%v: end state differs (-reference +perturbed):\n%s", f.Perturbation, f.Diff)
}

// Report is what a Check did and found.
type Report struct {
	// Writes are the controller's writes in the reference run, in order.
	Writes []string
	// Watched are the resources the controller watched.
	Watched []schema.GroupVersionResource
	// Runs counts the perturbed runs made, Skipped those the budget left out.
	Runs, Skipped int
	// Failures are the runs that differ, in the order run.
	Failures []Failure
}

// Check runs steps once unperturbed, twice (to tell the scenario's own nondeterminism,
// reported as ErrNondeterministic, from what a perturbation causes), and then under each
// perturbation the options allow, each time with a fresh cluster and clock, and compares
// every run's end state with the reference's. The error is for what stops the check as a
// whole (bad options, a reference run that fails); perturbed runs that differ are the
// Report's Failures.
func Check(ctx context.Context, ctrl Controller, steps []Step, opts Options) (*Report, error) {
	h, err := newHarness(ctrl, steps, opts)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(h.opts.Budget)
	ref, err := h.run(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReference, err)
	}
	again, err := h.run(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReference, err)
	}
	if diff := gocmp.Diff(ref.state, again.state); diff != "" {
		return nil, fmt.Errorf("%w (mark the fields that differ in Options.Nondeterministic; -first +second):\n%s", ErrNondeterministic, diff)
	}
	rep := &Report{Writes: ref.writes, Watched: ref.watched}
	h.ref = ref
	plan := h.plan()
	for i, p := range plan {
		if time.Now().After(deadline) || ctx.Err() != nil {
			rep.Skipped = len(plan) - i
			break
		}
		rep.Runs++
		got, err := h.run(ctx, &p)
		switch {
		case err != nil:
			rep.Failures = append(rep.Failures, Failure{Perturbation: p, Err: err})
		default:
			if diff := gocmp.Diff(ref.state, got.state); diff != "" {
				rep.Failures = append(rep.Failures, Failure{Perturbation: p, Diff: diff,
					NotReached: p.Class != Unobserved && !got.fired})
			}
		}
	}
	return rep, nil
}

// Test is Check for a test: it fails t for an error and for every Failure, each with the
// seed that replays it, and returns the report (nil after an error). The controller's
// logs (klog.FromContext) go to t.
func Test(t testing.TB, ctrl Controller, steps []Step, opts Options) *Report {
	t.Helper()
	// The controller's logs go to t, shown when the test fails or runs with -v.
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	rep, err := Check(ctx, ctrl, steps, opts)
	if err != nil {
		t.Fatalf("perturb.Check: %v", err)
		return nil
	}
	for _, f := range rep.Failures {
		t.Errorf("%v\nreplay it with perturb.Options{Replay: ptr.To[uint64](%d)}", f, f.Seed)
	}
	t.Logf("perturb: %d writes in the reference run, %d perturbed runs, %d left out by the budget, %d failed",
		len(rep.Writes), rep.Runs, rep.Skipped, len(rep.Failures))
	return rep
}

// harness holds what all runs of one Check share.
type harness struct {
	ctrl  Controller
	steps []Step
	opts  Options
	kinds map[schema.GroupVersionResource]schema.GroupVersionKind
	scope map[schema.GroupVersionResource]bool // compared resources; nil: all but ignored
	ref   *outcome
}

func newHarness(ctrl Controller, steps []Step, opts Options) (*harness, error) {
	if ctrl == nil {
		return nil, fmt.Errorf("%w: nil Controller", ErrInvalid)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("%w: a scenario of no steps", ErrInvalid)
	}
	for i, s := range steps {
		if s.Do == nil {
			return nil, fmt.Errorf("%w: step %d (%q) has no Do", ErrInvalid, i, s.Name)
		}
	}
	for _, c := range opts.Classes {
		if c < Crash || c > Unobserved {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, c)
		}
	}
	if opts.Runs < 0 || opts.Budget < 0 || opts.Quiet < 0 || opts.Window < 0 || opts.StepTimeout < 0 {
		return nil, fmt.Errorf("%w: a negative Runs, Budget, Quiet, Window or StepTimeout", ErrInvalid)
	}
	if len(opts.Classes) == 0 {
		opts.Classes = []Class{Crash, Stale, Unobserved}
	}
	opts.Runs = cmp.Or(opts.Runs, 60)
	opts.Budget = cmp.Or(opts.Budget, 2*time.Minute)
	opts.Quiet = cmp.Or(opts.Quiet, 200*time.Millisecond)
	opts.Window = cmp.Or(opts.Window, 4*opts.Quiet)
	opts.StepTimeout = cmp.Or(opts.StepTimeout, 30*time.Second)
	if opts.Start.IsZero() {
		opts.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	h := &harness{ctrl: ctrl, steps: steps, opts: opts, kinds: map[schema.GroupVersionResource]schema.GroupVersionKind{}}
	for i, d := range opts.Definitions {
		if guard.IsNil(d) {
			return nil, fmt.Errorf("%w: Definitions[%d] is nil", ErrInvalid, i)
		}
		c, err := d.Build()
		if err != nil {
			return nil, fmt.Errorf("%w: Definitions[%d]: %w", ErrInvalid, i, err)
		}
		for _, v := range c.Spec.Versions {
			gv := schema.GroupVersion{Group: c.Spec.Group, Version: v.Name}
			h.kinds[gv.WithResource(c.Spec.Names.Plural)] = gv.WithKind(c.Spec.Names.Kind)
		}
	}
	if len(opts.Compare) > 0 {
		h.scope = map[schema.GroupVersionResource]bool{}
		for _, r := range opts.Compare {
			h.scope[r] = true
		}
	}
	return h, nil
}

// ignored are the resources that are neither counted, compared nor waited for: leader
// election's Leases and the Events recorders write as time goes by.
func ignored(gvr schema.GroupVersionResource) bool {
	return gvr.Resource == "leases" && gvr.Group == "coordination.k8s.io" ||
		gvr.Resource == "events" && (gvr.Group == "" || gvr.Group == "events.k8s.io")
}

// plan returns the perturbations to run: every crash point and a sample of lag and
// disconnection windows, within Runs; or only the one Replay names.
func (h *harness) plan() []Perturbation {
	if r := h.opts.Replay; r != nil {
		if p, ok := h.decode(*r); ok {
			return []Perturbation{p}
		}
		return nil
	}
	share := max(1, h.opts.Runs/len(h.opts.Classes))
	rng := rand.New(rand.NewPCG(h.opts.Seed, 0x9e3779b97f4a7c15))
	var out []Perturbation
	for _, c := range h.opts.Classes {
		var seeds []uint64
		switch c {
		case Crash:
			for n := range uint64(len(h.ref.writes)) {
				seeds = append(seeds, 3*n)
			}
			if len(seeds) > share {
				rng.Shuffle(len(seeds), func(i, j int) { seeds[i], seeds[j] = seeds[j], seeds[i] })
				seeds = seeds[:share]
				slices.Sort(seeds)
			}
		default:
			seen := map[string]bool{}
			for range 4 * share {
				if len(seeds) == share {
					break
				}
				s := 3*rng.Uint64N(1<<20) + uint64(c)
				p, ok := h.decode(s)
				if !ok || seen[p.key()] {
					continue
				}
				seen[p.key()] = true
				seeds = append(seeds, s)
			}
		}
		for _, s := range seeds {
			if p, ok := h.decode(s); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// key tells apart the perturbations that would run the same.
func (p Perturbation) key() string {
	return fmt.Sprint(p.Class, p.Write, p.Step, p.Resource, p.Events)
}

// decode returns the perturbation of seed, given the reference run: seed%3 is the class,
// and seed/3 the crash's write (from 0), or the source of a window's choices.
func (h *harness) decode(seed uint64) (Perturbation, bool) {
	p := Perturbation{Class: Class(seed % 3), Seed: seed}
	n := seed / 3
	writes := h.ref.writes
	if p.Class == Crash {
		if n >= uint64(len(writes)) {
			return p, false
		}
		p.Write, p.WriteDesc = int(n)+1, writes[n]
		return p, true
	}
	if len(h.ref.watched) == 0 {
		return p, false
	}
	rng := rand.New(rand.NewPCG(n, 0x5eed))
	p.Resource = h.ref.watched[rng.IntN(len(h.ref.watched))]
	p.Events = 1 + rng.IntN(3)
	if p.Class == Stale {
		if len(writes) == 0 {
			return p, false
		}
		p.Write = 1 + rng.IntN(len(writes))
		p.WriteDesc = writes[p.Write-1]
		return p, true
	}
	p.Step = rng.IntN(len(h.steps))
	return p, true
}

// outcome is what one run ends with.
type outcome struct {
	// fired says whether the perturbation's write came (a Crash's or a Stale's).
	fired   bool
	writes  []string
	watched []schema.GroupVersionResource
	leases  bool
	state   map[string]map[string]any
}

// run is one run of the scenario: a fresh cluster, a fresh clock, the controller's
// processes one after the other, and the scenario's steps.
type run struct {
	h     *harness
	p     *Perturbation
	c     *cluster
	clock *clocktesting.FakeClock

	mu         sync.Mutex
	last       time.Time // of the last change of a resource not ignored
	writes     []string
	fired      bool
	ns         string                               // the run's namespace on a Server
	touched    map[schema.GroupVersionResource]bool // written in it
	watched    map[schema.GroupVersionResource]bool
	leases     bool
	proc       *process
	restarting bool
	crash      chan struct{}
	// win is the read perturbation under way on a Server, winCh closed (and replaced)
	// when it opens or closes.
	win   *serverWindow
	winCh chan struct{}
}

// process is one process of the controller.
type process struct {
	id     int
	cancel context.CancelFunc
	done   chan error
	dead   bool
	// unwatched are the resources a restarted process has yet to watch (those the
	// reference's watched), and unleased whether it has yet to acquire its Lease (when
	// the reference's held one): until then it is starting, and the cluster is not
	// settled however quiet it is.
	unwatched map[schema.GroupVersionResource]bool
	unleased  bool
}

func (p *process) starting() bool {
	return len(p.unwatched) > 0 || p.unleased
}

func (h *harness) run(ctx context.Context, p *Perturbation) (*outcome, error) {
	r := &run{h: h, p: p, clock: clocktesting.NewFakeClock(h.opts.Start), last: time.Now(),
		watched: map[schema.GroupVersionResource]bool{}, crash: make(chan struct{}, 1), winCh: make(chan struct{})}
	if h.opts.Server != nil {
		if err := r.onServer(ctx); err != nil {
			return nil, err
		}
	} else {
		r.c = newCluster(r.clock, h.kinds)
		r.c.mutation = r.changed
		defer r.c.shutdown()
	}
	parent := ctx // the end state is read after the processes' context ended
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.start(ctx, false)
	supervised := make(chan error, 1)
	go func() { supervised <- r.supervise(ctx) }()
	stop := func() error {
		cancel()
		err := <-supervised
		r.mu.Lock()
		proc := r.proc
		r.mu.Unlock()
		return errors.Join(err, r.stop(proc))
	}
	scenario := r.env(-1)
	for i, s := range h.steps {
		if p != nil && p.Class == Unobserved && p.Step == i {
			if r.c != nil {
				r.c.openWindow(p.Resource, true, false, p.Events, h.opts.Window)
			} else {
				r.mu.Lock()
				r.openServerWindow(p.Resource, true, false, p.Events)
				r.mu.Unlock()
			}
		}
		if err := s.Do(ctx, scenario); err != nil {
			return nil, errors.Join(fmt.Errorf("step %d (%s): %w", i, s.Name, err), stop())
		}
		r.mu.Lock()
		r.last = time.Now() // a step that only moves the clock changes nothing in the cluster
		r.mu.Unlock()
		if err := r.settle(ctx, i == len(h.steps)-1); err != nil {
			return nil, errors.Join(fmt.Errorf("after step %d (%s): %w", i, s.Name, err), stop())
		}
	}
	if err := stop(); err != nil {
		return nil, err
	}
	state, err := r.snapshot(parent)
	if err != nil {
		return nil, err
	}
	out := &outcome{fired: r.fired, writes: r.writes, leases: r.leases, state: state}
	for gvr := range r.watched {
		out.watched = append(out.watched, gvr)
	}
	slices.SortFunc(out.watched, func(a, b schema.GroupVersionResource) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// start starts a process of the controller.
func (r *run) start(ctx context.Context, restart bool) {
	r.mu.Lock()
	id := 0
	if r.proc != nil {
		id = r.proc.id + 1
	}
	pctx, cancel := context.WithCancel(ctx)
	proc := &process{id: id, cancel: cancel, done: make(chan error, 1), unwatched: map[schema.GroupVersionResource]bool{}}
	if restart && r.h.ref != nil {
		proc.unleased = r.h.ref.leases
		for _, gvr := range r.h.ref.watched {
			proc.unwatched[gvr] = true
		}
	}
	r.proc = proc
	r.mu.Unlock()
	env := r.env(id)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				proc.done <- fmt.Errorf("%w: %v", ErrControllerPanic, v)
			}
		}()
		proc.done <- r.h.ctrl(pctx, env)
	}()
}

// stop ends a process and waits for its Controller to return.
func (r *run) stop(proc *process) error {
	proc.cancel()
	select {
	case err := <-proc.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("controller process %d: %w", proc.id, err)
		}
		return nil
	case <-time.After(r.h.opts.StepTimeout):
		return fmt.Errorf("%w: process %d did not return within %v of its context's end", ErrNoStop, proc.id, r.h.opts.StepTimeout)
	}
}

// supervise restarts the controller after a crash, and reports a process that returned
// on its own.
func (r *run) supervise(ctx context.Context) error {
	// Windows end on time also while a step runs (one that waits for the controller).
	tick := time.NewTicker(r.h.opts.Quiet / 10)
	defer tick.Stop()
	for {
		r.mu.Lock()
		proc := r.proc
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			r.expire()
		case err := <-proc.done:
			proc.done <- err // for stop
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("with no error")
			}
			return fmt.Errorf("%w: process %d: %w", ErrReturned, proc.id, err)
		case <-r.crash:
			err := r.stop(proc)
			if err != nil {
				return err
			}
			r.start(ctx, true)
			r.mu.Lock()
			r.restarting = false
			r.mu.Unlock()
		}
	}
}

// expire closes the windows past their deadline and reports whether any is still open.
func (r *run) expire() (open bool) {
	if r.c == nil {
		return r.expireServerWindow()
	}
	open, closed := r.c.expireWindows()
	if closed {
		r.mu.Lock()
		r.last = time.Now() // what the window held back is delivered now: the controller acts on it
		r.mu.Unlock()
	}
	return open
}

// settle waits until no change has been made for Quiet, no process is restarting and,
// at the end (final), every window has closed.
func (r *run) settle(ctx context.Context, final bool) error {
	deadline := time.Now().Add(r.h.opts.StepTimeout)
	t := time.NewTicker(r.h.opts.Quiet / 10)
	defer t.Stop()
	for {
		open := r.expire()
		r.mu.Lock()
		busy := r.restarting || r.proc.starting() || time.Since(r.last) < r.h.opts.Quiet
		r.mu.Unlock()
		if !busy && (!final || !open) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %v", ErrNoSettle, r.h.opts.StepTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// errCrashed is what a crashed process's requests get: its connection is gone.
var errCrashed = errors.New("perturb: the process crashed (connection refused)")

// env returns the clients of process id, or the scenario's (-1).
func (r *run) env(id int) Env {
	if r.h.opts.Server != nil {
		return r.serverEnv(id)
	}
	cs := kubefake.NewClientset()
	cs.ReactionChain, cs.WatchReactionChain, cs.ProxyReactionChain = nil, nil, nil
	listKinds := map[schema.GroupVersionResource]string{}
	for gvr, gvk := range r.h.kinds {
		listKinds[gvr] = gvk.Kind + "List"
	}
	for gvr, gvk := range builtinKinds {
		listKinds[gvr] = gvk.Kind + "List"
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds)
	dyn.ReactionChain, dyn.WatchReactionChain = nil, nil
	for _, f := range []struct {
		fake  *k8stesting.Fake
		typed bool
	}{{&cs.Fake, true}, {&dyn.Fake, false}} {
		cl := client{c: r.c, typed: f.typed}
		f.fake.AddReactor("*", "*", r.react(id, cl))
		f.fake.AddWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
			if id >= 0 {
				if r.dead(id) {
					return true, nil, errCrashed
				}
				r.watching(id, a.GetResource())
			}
			return cl.watchReact(a)
		})
	}
	return Env{Clientset: cs, Dynamic: dyn, Clock: r.clock, Namespace: "default"}
}

func (r *run) dead(id int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc.id != id || r.proc.dead
}

// react serves process id's requests (the scenario's when id < 0): a crashed process's
// fail; a process's successful writes are counted, and write N crashes it or starts a lag.
func (r *run) react(id int, cl client) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		if id >= 0 && r.dead(id) {
			return true, nil, errCrashed
		}
		handled, obj, err := cl.react(a)
		if id < 0 || err != nil {
			return handled, obj, err
		}
		r.wrote(id, a.GetVerb(), a.GetResource(), func() string { return describe(a, obj) })
		return handled, obj, err
	}
}

// wrote counts process id's successful write (verb on gvr, desc naming it): write N
// crashes the process or starts a lag; a Lease's write tells that the process leads.
func (r *run) wrote(id int, verb string, gvr schema.GroupVersionResource, desc func() string) {
	switch verb {
	case "create", "update", "patch", "delete":
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ignored(gvr) {
		if gvr.Resource == "leases" {
			r.leases = true
			if r.proc.unleased {
				r.proc.unleased = false
				r.last = time.Now() // the quiet that counts begins as it leads
			}
		}
		return
	}
	r.writes = append(r.writes, desc())
	n := len(r.writes)
	switch p := r.p; {
	case p == nil || p.Write != n:
	case p.Class == Crash:
		r.fired = true
		r.proc.dead, r.restarting = true, true
		r.crash <- struct{}{}
	case p.Class == Stale && r.c == nil:
		r.fired = true
		r.openServerWindow(p.Resource, false, gvr == p.Resource, p.Events)
	case p.Class == Stale:
		r.fired = true
		r.c.openWindow(p.Resource, false, gvr == p.Resource, p.Events, r.h.opts.Window)
	}
}

// watching notes that process id opened a watch of gvr.
func (r *run) watching(id int, gvr schema.GroupVersionResource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ignored(gvr) {
		r.watched[gvr] = true
	}
	if r.proc.id == id && r.proc.unwatched[gvr] {
		delete(r.proc.unwatched, gvr)
		r.last = time.Now()
	}
}

// changed notes a change of the cluster: the quiet begins again.
func (r *run) changed(gvr schema.GroupVersionResource) {
	if !ignored(gvr) {
		r.mu.Lock()
		r.last = time.Now()
		r.mu.Unlock()
	}
}

// describe names a write: verb, resource and subresource, namespace/name.
func describe(a k8stesting.Action, obj runtime.Object) string {
	name := ""
	switch a := a.(type) {
	case interface{ GetName() string }:
		name = a.GetName()
	case interface{ GetObject() runtime.Object }:
		if m, err := meta.Accessor(a.GetObject()); err == nil {
			name = m.GetName()
			if name == "" {
				name = m.GetGenerateName() + "*"
			}
		}
	}
	res := a.GetResource().Resource
	if g := a.GetResource().Group; g != "" {
		res += "." + g
	}
	if s := a.GetSubresource(); s != "" {
		res += "/" + s
	}
	ns := a.GetNamespace()
	if ns != "" {
		ns += "/"
	}
	return fmt.Sprintf("%s %s %s%s", a.GetVerb(), res, ns, name)
}

// snapshot returns the compared objects, normalised, by resource and key.
func (r *run) snapshot(ctx context.Context) (map[string]map[string]any, error) {
	if r.h.opts.Server != nil {
		return r.serverSnapshot(ctx)
	}
	r.c.mu.Lock()
	var gvrs []schema.GroupVersionResource
	for gvr := range r.c.res {
		gvrs = append(gvrs, gvr)
	}
	r.c.mu.Unlock()
	return r.h.state(gvrs, func(gvr schema.GroupVersionResource) ([]*unstructured.Unstructured, error) {
		items, _, err := r.c.list(gvr, "", metav1.ListOptions{})
		return items, err
	})
}

// state lists the compared resources of gvrs and normalises their objects.
func (h *harness) state(gvrs []schema.GroupVersionResource, list func(schema.GroupVersionResource) ([]*unstructured.Unstructured, error)) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for _, gvr := range gvrs {
		if h.scope != nil && !h.scope[gvr] || h.scope == nil && ignored(gvr) {
			continue
		}
		items, err := list(gvr)
		if err != nil {
			return nil, fmt.Errorf("listing %v for the end state: %w", gvr, err)
		}
		objs := map[string]any{}
		ranks := map[string]int{}
		for _, u := range items {
			key := u.GetNamespace() + "/" + u.GetName()
			if g := u.GetGenerateName(); g != "" && strings.HasPrefix(u.GetName(), g) {
				key = fmt.Sprintf("%s/%s*#%d", u.GetNamespace(), g, ranks[u.GetNamespace()+"/"+g])
				ranks[u.GetNamespace()+"/"+g]++
				u.SetName(g + "*")
			}
			objs[key] = h.normalize(u)
		}
		if len(objs) > 0 {
			out[gvr.String()] = objs
		}
	}
	return out, nil
}

// alwaysNondeterministic are the paths that differ between runs whatever the controller
// does: what the server stamps, and when a condition last changed.
var alwaysNondeterministic = [][]string{
	{"metadata", "resourceVersion"}, {"metadata", "uid"}, {"metadata", "creationTimestamp"},
	{"metadata", "generation"}, {"metadata", "managedFields"}, {"metadata", "ownerReferences", "uid"},
	{"status", "conditions", "lastTransitionTime"},
}

// normalize removes the nondeterministic paths from u.
func (h *harness) normalize(u *unstructured.Unstructured) map[string]any {
	for _, path := range slices.Concat(alwaysNondeterministic, h.opts.Nondeterministic) {
		removePath(u.Object, path)
	}
	return u.Object
}

// removePath removes path from v; a list on the way has it removed from every item.
func removePath(v any, path []string) {
	switch v := v.(type) {
	case map[string]any:
		if len(path) == 1 {
			delete(v, path[0])
		} else if len(path) > 1 {
			removePath(v[path[0]], path[1:])
		}
	case []any:
		for _, item := range v {
			removePath(item, path)
		}
	}
}
