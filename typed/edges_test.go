package typed_test

// Tests that attack the Loop's boundaries with the mistakes a user can make in Options and
// arguments (DESIGN 18), and its shutdown (DESIGN 15): never a panic, never a deletion
// lost, and a routine stop never reported as a failure.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

// failsOnce fails each key's first reconcile, so that it is retried, and counts the
// reconciles.
func failsOnce(attempts *atomic.Int32) typed.Reconciler[obj] {
	return typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		if attempts.Add(1) == 1 {
			return typed.Result{}, errors.New("boom")
		}
		return typed.Result{}, nil
	})
}

// Typed-nil Options.Clock and Options.RateLimiter are unset: the real clock and the
// default rate limiter time the retry, where calling them would panic on a worker.
func TestTypedNilClockAndRateLimiterAreTheDefaults(t *testing.T) {
	var clock *testingclock.FakeClock
	var limiter *fixedDelay
	for _, tc := range []struct {
		name string
		opts typed.Options
	}{
		{"a typed-nil Clock", typed.Options{Clock: clock, RateLimiter: fastRetries}},
		{"a typed-nil RateLimiter", typed.Options{RateLimiter: limiter}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var attempts atomic.Int32
			harness(t, fake.New[obj, list](cm("a", "1")), failsOnce(&attempts), tc.opts)
			eventually(t, "the failed key retried", func() bool { return attempts.Load() >= 2 })
		})
	}
}

// panickingLimiter panics in every method.
type panickingLimiter struct{}

func (panickingLimiter) When(string) time.Duration { panic("When boom") }
func (panickingLimiter) Forget(string)             { panic("Forget boom") }
func (panickingLimiter) NumRequeues(string) int    { panic("NumRequeues boom") }

// A RateLimiter that panics is logged, and the default limiter spaces the retry instead:
// the key is retried, and the Loop goes on.
func TestAPanickingRateLimiterIsLoggedAndTheKeyStillRetried(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	var attempts atomic.Int32
	var logs logLines
	l, err := typed.NewLoop(c, failsOnce(&attempts), typed.Options{RateLimiter: panickingLimiter{}, MaxRetries: 3})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(klog.NewContext(context.Background(), logs.logger()), t, src, c, l)
	eventually(t, "the failed key retried", func() bool { return attempts.Load() >= 2 })
	eventually(t, "the panic logged", func() bool { return len(logs.containing("RateLimiter", "When boom")) > 0 })
}

// Related refuses its nil arguments at once, a nil Loop included (it has no Run to
// report through); the Loop's Run still refuses those it registered.
func TestRelatedReturnsItsNilArgumentErrors(t *testing.T) {
	c := testctl.New(t, fake.New[obj, list](), controller.Options[obj]{})
	keysOf := func(obj) []string { return nil }
	ok := typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) { return typed.Result{}, nil })
	if err := typed.Related[obj, obj](nil, c, keysOf); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Related of a nil Loop = %v, want controller.ErrNilArgument", err)
	}
	for _, tc := range []struct {
		name    string
		related func(l *typed.Loop[obj]) error
	}{
		{"a nil controller", func(l *typed.Loop[obj]) error { return typed.Related[obj](l, nil, keysOf) }},
		{"a nil mapping", func(l *typed.Loop[obj]) error { return typed.Related(l, c, nil) }},
		{"a nil predicate", func(l *typed.Loop[obj]) error { return typed.Related(l, c, keysOf, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := typed.NewLoop(c, ok, typed.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.related(l); !errors.Is(err, controller.ErrNilArgument) {
				t.Errorf("Related = %v, want controller.ErrNilArgument", err)
			}
			if err := l.Run(t.Context()); !errors.Is(err, controller.ErrNilArgument) {
				t.Errorf("Run = %v, want controller.ErrNilArgument", err)
			}
		})
	}
}

// A reconcile cut short by the Loop stopping (it returns its context's error) is routine:
// not handed to OnError, not counted as a failure, not logged at error level; and a
// deletion so cut short is reconciled again by RunHandingOver's drain, with its last state.
//
// DESIGN 15: the deletion is reconciled with its last state, though its first reconcile
// was cut short.
func TestAReconcileInterruptedByTheLoopStoppingIsNotAFailure(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	var logs logLines
	got := newCalls()
	var reported atomic.Int32
	interrupted := make(chan struct{})
	var deletions atomic.Int32
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		if req.Deleted && deletions.Add(1) == 1 {
			close(interrupted)
			<-ctx.Done()
			return typed.Result{}, fmt.Errorf("cleaning up: %w", ctx.Err())
		}
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{OnError: func(context.Context, string, error) { reported.Add(1) }, Metrics: &countingMetrics{errors: &reported}})
	if err != nil {
		t.Fatal(err)
	}

	handOverDuringADeletion(klog.NewContext(context.Background(), logs.logger()), t, src, c, l, func() { got.wait(t, 1) }, interrupted)
	if diff := cmp.Diff([]string{"ns/a value=1", "ns/a deleted, last value=1"}, got.wait(t, 2)); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
	if n := reported.Load(); n != 0 {
		t.Errorf("%d reports of the interrupted reconcile (OnError and Metrics.ReconcileError), want none", n)
	}
	if lines := logs.containing(`"level"=0`, "interrupted"); len(lines) != 0 {
		t.Errorf("logged at level 0: %q", lines)
	}
	verifyNoLeaks(t)
}

// countingMetrics counts ReconcileError calls into errors.
type countingMetrics struct{ errors *atomic.Int32 }

func (*countingMetrics) QueueDepth(string, int)                 {}
func (*countingMetrics) Retry(string)                           {}
func (*countingMetrics) ReconcileLatency(string, time.Duration) {}
func (m *countingMetrics) ReconcileError(string, bool)          { m.errors.Add(1) }

// A Terminal error keeps its meaning when the Loop stops during the reconcile: the
// deletion is reported as terminal and dropped, not taken for an interruption and
// reconciled again by RunHandingOver's drain.
func TestATerminalErrorWrappingTheContextsIsNotAnInterruption(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	var live, deletions, terminal atomic.Int32
	inDeletion := make(chan struct{})
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		if !req.Deleted {
			live.Add(1)
			return typed.Result{}, nil
		}
		if deletions.Add(1) == 1 {
			close(inDeletion)
		}
		<-ctx.Done()
		return typed.Result{}, typed.Terminal(fmt.Errorf("gave up: %w", ctx.Err()))
	}), typed.Options{OnError: func(_ context.Context, _ string, err error) {
		if typed.IsTerminal(err) {
			terminal.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	handOverDuringADeletion(context.Background(), t, src, c, l, func() {
		eventually(t, "ns/a reconciled", func() bool { return live.Load() == 1 })
	}, inDeletion)
	if n, term := deletions.Load(), terminal.Load(); n != 1 || term != 1 {
		t.Errorf("the deletion was reconciled %d times and reported terminal %d times, want once and once", n, term)
	}
	verifyNoLeaks(t)
}

// handOverDuringADeletion runs c and l.RunHandingOver (held never ends), waits until l has
// reconciled ns/a (waitLive returns), deletes it, waits until its deletion's reconcile has
// begun (reconciling is closed), ends l's context, and waits for l and then c to return.
func handOverDuringADeletion(ctx context.Context, t *testing.T, src *fake.ListerWatcher[obj, list], c *controller.Controller[obj, list],
	l *typed.Loop[obj], waitLive func(), reconciling <-chan struct{},
) {
	t.Helper()
	cctx, stopController := context.WithCancel(context.Background())
	defer stopController()
	cdone := make(chan error, 1)
	go func() { cdone <- c.Run(cctx) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ldone := make(chan error, 1)
	go func() { ldone <- l.RunHandingOver(ctx, context.Background()) }()
	waitLive()
	if _, err := src.Delete("ns", "a"); err != nil {
		t.Fatal(err)
	}
	receive(t, reconciling, "the deletion's reconcile")
	cancel()
	if err := receive(t, ldone, "RunHandingOver returns"); err != nil {
		t.Fatal(err)
	}
	stopController()
	if err := receive(t, cdone, "the controller returns"); err != nil {
		t.Fatal(err)
	}
}

// noRegistration is a Source whose AddHandler answers neither a Registration nor an error.
type noRegistration struct{}

func (noRegistration) AddHandler(string, controller.Handler[obj]) (*controller.Registration, error) {
	return nil, nil
}

func (noRegistration) Get(string) (obj, bool) { return nil, false }

// A Source that answers AddHandler with neither a Registration nor an error makes Run
// fail with ErrNoRegistration (DESIGN 18), as a source Related to the Loop does, instead
// of returning nil as if its context had ended.
func TestASourceThatGivesNoRegistrationIsAnError(t *testing.T) {
	ok := typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) { return typed.Result{}, nil })
	l, err := typed.NewLoop[obj](noRegistration{}, ok, typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(t.Context()); !errors.Is(err, typed.ErrNoRegistration) {
		t.Errorf("Run over the source = %v, want ErrNoRegistration", err)
	}
	c := testctl.New(t, fake.New[obj, list](), controller.Options[obj]{})
	l, err = typed.NewLoop(c, ok, typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := typed.Related[obj](l, noRegistration{}, func(obj) []string { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(t.Context()); !errors.Is(err, typed.ErrNoRegistration) {
		t.Errorf("Run related to the source = %v, want ErrNoRegistration", err)
	}
	verifyNoLeaks(t)
}
