package typed_test

// Tests of RunHandingOver: the deletions a Loop has seen and not yet reconciled when its
// keys move to another process are reconciled before it returns (DESIGN 15), and nothing
// else is.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

// handOverFixture is a controller over a fake with objects a, b, c and r, and a Loop over
// it with one worker whose reconciles are recorded; the reconcile of a's value 2 blocks
// until release is closed, the first of r's deletion fails, and a failed key is retried
// only after an hour.
type handOverFixture struct {
	src      *fake.ListerWatcher[obj, list]
	c        *controller.Controller[obj, list]
	loop     *typed.Loop[obj]
	blocked  chan struct{}
	release  chan struct{}
	errs     chan error
	mu       sync.Mutex
	got      []string
	inFlight atomic.Int32
	overlap  atomic.Bool
	// block, when set, is called in each reconcile of a deletion with its context.
	block func(ctx context.Context, req typed.Request[obj])
}

func newHandOverFixture(t *testing.T, workers int) *handOverFixture {
	f := &handOverFixture{
		src:     fake.New[obj, list](cm("a", "1"), cm("b", "1"), cm("c", "1"), cm("r", "1")),
		blocked: make(chan struct{}), release: make(chan struct{}), errs: make(chan error, 10),
	}
	f.c = testctl.New(t, f.src, controller.Options[obj]{})
	var rFailed atomic.Bool
	var err error
	f.loop, err = typed.NewLoop(f.c, typed.ReconcilerFunc[obj](func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		if f.inFlight.Add(1) > int32(workers) {
			f.overlap.Store(true)
		}
		defer f.inFlight.Add(-1)
		f.mu.Lock()
		f.got = append(f.got, describe(req))
		block := f.block
		f.mu.Unlock()
		switch {
		case req.Key == "ns/a" && !req.Deleted && req.Object.Data["v"] == "2":
			close(f.blocked)
			<-f.release
		case req.Key == "ns/r" && req.Deleted && !rFailed.Swap(true):
			return typed.Result{}, errors.New("r's clean-up failed")
		case req.Deleted && block != nil:
			block(ctx, req)
		}
		return typed.Result{}, nil
	}), typed.Options{Workers: workers, RateLimiter: &fixedDelay{d: time.Hour, requeues: map[string]int{}},
		OnError: func(_ context.Context, _ string, err error) { f.errs <- err }})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, f.c.Run)
	return f
}

// reconciles returns the reconciles recorded from the n-th on.
func (f *handOverFixture) reconciles(from int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got[from:])
}

// setUp waits for the initial reconciles, then leaves r's deletion with a retry
// scheduled, a's update in flight, and b's deletion and c's update queued. It returns how
// many reconciles were recorded by then.
func (f *handOverFixture) setUp(t *testing.T) int {
	t.Helper()
	eventually(t, "the initial reconciles", func() bool { return len(f.reconciles(0)) == 4 })
	if _, err := f.src.Delete("ns", "r"); err != nil {
		t.Fatal(err)
	}
	<-f.errs // r's deletion failed, and is to be retried in an hour
	if _, err := f.src.Update(cm("a", "2")); err != nil {
		t.Fatal(err)
	}
	<-f.blocked
	if _, err := f.src.Delete("ns", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.src.Update(cm("c", "2")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b and c queued", func() bool { live, sync := f.loop.Queued(); return live+sync == 2 })
	return len(f.reconciles(0))
}

func TestRunHandingOverReconcilesThePendingDeletionsAndNothingElse(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(l *typed.Loop[obj], ctx context.Context) error
		want []string
	}{
		{
			name: "RunHandingOver",
			run: func(l *typed.Loop[obj], ctx context.Context) error {
				return l.RunHandingOver(ctx, context.Background())
			},
			want: []string{"ns/b deleted, last value=1", "ns/r deleted, last value=1"},
		},
		{
			name: "Run drops them",
			run:  func(l *typed.Loop[obj], ctx context.Context) error { return l.Run(ctx) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHandOverFixture(t, 1)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- tc.run(f.loop, ctx) }()
			n := f.setUp(t)
			cancel()
			close(f.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			got := f.reconciles(n)
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("reconciles once the Loop was told to stop (-want +got):\n%s", diff)
			}
			if f.overlap.Load() {
				t.Error("two reconciles ran at once with one worker")
			}
			if n := f.loop.Tombstones() + f.loop.ScheduledRetries(); n != 0 {
				t.Errorf("%d last states and retries kept after the Loop returned", n)
			}
		})
	}
}

func TestRunHandingOverReconcilesADeletionThatArrivesDuringTheHandOver(t *testing.T) {
	f := newHandOverFixture(t, 1)
	inB, releaseB := make(chan struct{}), make(chan struct{})
	f.block = func(_ context.Context, req typed.Request[obj]) {
		if req.Key == "ns/b" {
			close(inB)
			<-releaseB
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.loop.RunHandingOver(ctx, context.Background()) }()
	n := f.setUp(t)
	cancel()
	close(f.release)
	<-inB
	if _, err := f.src.Delete("ns", "c"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "c's deletion seen", func() bool { _, ok := f.loop.LastKnown("ns/c"); return ok })
	close(releaseB)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := f.reconciles(n)
	slices.Sort(got)
	want := []string{"ns/b deleted, last value=1", "ns/c deleted, last value=2", "ns/r deleted, last value=1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reconciles once the Loop was told to stop (-want +got):\n%s", diff)
	}
}

func TestAFailedDeletionDuringTheHandOverIsReportedOnceAndNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome func() (typed.Result, error)
	}{
		{"an error", func() (typed.Result, error) { return typed.Result{}, errors.New("boom") }},
		{"a terminal error", func() (typed.Result, error) { return typed.Result{}, typed.Terminal(errors.New("boom")) }},
		{"a panic", func() (typed.Result, error) { panic("boom") }},
		{"a requeue", func() (typed.Result, error) { return typed.Result{RequeueAfter: time.Millisecond}, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fake.New[obj, list](cm("a", "1"), cm("b", "1"))
			c := testctl.New(t, src, controller.Options[obj]{})
			var handingOver atomic.Bool
			var before atomic.Int32 // reconciles before the hand-over
			blocked, release := make(chan struct{}), make(chan struct{})
			got := newCalls()
			var errs []error
			var mu sync.Mutex
			l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
				if req.Key == "ns/a" && !req.Deleted && req.Object.Data["v"] == "2" {
					close(blocked)
					<-release
				}
				if handingOver.Load() && req.Deleted {
					got.add(describe(req))
					return tc.outcome()
				}
				before.Add(1)
				return typed.Result{}, nil
			}), typed.Options{OnError: func(_ context.Context, key string, err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}})
			if err != nil {
				t.Fatal(err)
			}
			runUntilEnd(context.Background(), t, c.Run)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.RunHandingOver(ctx, context.Background()) }()
			eventually(t, "the initial reconciles", func() bool { return before.Load() == 2 })
			if _, err := src.Update(cm("a", "2")); err != nil {
				t.Fatal(err)
			}
			<-blocked
			if _, err := src.Delete("ns", "b"); err != nil {
				t.Fatal(err)
			}
			eventually(t, "b queued", func() bool { live, sync := l.Queued(); return live+sync == 1 })
			handingOver.Store(true)
			cancel()
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"ns/b deleted, last value=1"}, got.wait(t, 1)); diff != "" {
				t.Errorf("reconciles during the hand-over (-want +got):\n%s", diff)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(errs) != 1 || !errors.Is(errs[0], typed.ErrHandedOver) {
				t.Errorf("reported %v, want one error wrapping ErrHandedOver", errs)
			}
		})
	}
}

func TestRunHandingOverStopsWhenHeldEnds(t *testing.T) {
	f := newHandOverFixture(t, 1)
	held, endHeld := context.WithCancel(context.Background())
	var cancelledCtx atomic.Bool
	inDeletion := make(chan struct{})
	var once sync.Once
	f.block = func(ctx context.Context, req typed.Request[obj]) {
		once.Do(func() { close(inDeletion) })
		<-ctx.Done()
		cancelledCtx.Store(true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.loop.RunHandingOver(ctx, held) }()
	n := f.setUp(t)
	cancel()
	close(f.release)
	<-inDeletion
	endHeld()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !cancelledCtx.Load() {
		t.Error("the deletion's reconcile did not see its context end with held")
	}
	if got := f.reconciles(n); len(got) != 1 {
		t.Errorf("reconciles during the hand-over: %v, want one, the rest dropped when held ended", got)
	}
	if n := f.loop.Tombstones(); n != 0 {
		t.Errorf("%d last states kept after the Loop returned", n)
	}
}

func TestRunHandingOverWithANilHeldIsAnError(t *testing.T) {
	src := fake.New[obj, list]()
	l, err := typed.NewLoop(testctl.New(t, src, controller.Options[obj]{}), typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	//nolint:staticcheck // a nil context is what this attacks
	if err := l.RunHandingOver(t.Context(), nil); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("RunHandingOver with a nil held = %v, want an error wrapping controller.ErrNilArgument", err)
	}
}
