package typed_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

type obj = *corev1.ConfigMap
type list = *corev1.ConfigMapList

func cm(name, value string) obj {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"v": value}}
}

// fastRetries retries at once, so that tests do not wait on backoff.
var fastRetries = workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Millisecond)

// harness runs a controller over a fake and a loop over it until the test ends, and
// checks that nothing is left running.
func harness(t *testing.T, src *fake.ListerWatcher[obj, list], r typed.Reconciler[obj], opts typed.Options) *typed.Loop[obj] {
	t.Helper()
	c := testctl.New(t, src, controller.Options[obj]{})
	l, err := typed.NewLoop(c, r, opts)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(context.Background(), t, src, c, l)
	return l
}

// runUntilEnd runs each function on its own goroutine until the test ends, then cancels
// them, waits for each to return (failing t on an error) and checks that no goroutine is
// left. It returns the functions' context.
func runUntilEnd(ctx context.Context, t *testing.T, fns ...func(context.Context) error) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, len(fns))
	for _, fn := range fns {
		go func() { done <- fn(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range fns {
			if err := receive(t, done, "the controllers and loops return once cancelled"); err != nil {
				t.Errorf("Run: %v", err)
			}
		}
		verifyNoLeaks(t)
	})
	return ctx
}

// calls records reconcile requests, reduced to what the tests compare.
type calls struct {
	mu  sync.Mutex
	got []string
	ch  chan struct{}
}

func newCalls() *calls { return &calls{ch: make(chan struct{}, 100)} }

func (c *calls) add(s string) {
	c.mu.Lock()
	c.got = append(c.got, s)
	c.mu.Unlock()
	c.ch <- struct{}{}
}

func (c *calls) wait(t *testing.T, n int) []string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		got := append([]string(nil), c.got...)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-c.ch:
		case <-timeout:
			t.Fatalf("timed out waiting for %d reconciles, got %v", n, got)
		}
	}
}

func describe(req typed.Request[obj]) string {
	switch {
	case !req.Deleted:
		return req.Key + " value=" + req.Object.Data["v"]
	case req.LastKnown != nil:
		return req.Key + " deleted, last value=" + req.LastKnown.Data["v"]
	default:
		return req.Key + " deleted"
	}
}

func TestReconcilerGetsFreshestObjectOrLastKnownStateOfDeletion(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	got := newCalls()
	harness(t, src, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{})
	got.wait(t, 1)
	if _, err := src.Delete("ns", "a"); err != nil {
		t.Fatal(err)
	}
	want := []string{"ns/a value=1", "ns/a deleted, last value=1"}
	if diff := cmp.Diff(want, got.wait(t, 2)); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}

func TestReconcileResults(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		results    []error // one per attempt; nil ends
		requeue    time.Duration
		maxRetries int
		want       int // attempts
		wantErrs   []string
	}{
		{name: "done is reconciled once", results: []error{nil}, want: 1},
		{name: "an error is retried until it succeeds", results: []error{boom, boom, nil}, want: 3,
			wantErrs: []string{"boom", "boom"}},
		{name: "retries stop at the cap", results: []error{boom, boom, boom, boom, boom}, maxRetries: 2, want: 3,
			wantErrs: []string{"boom", "boom", "retries exhausted after 3 attempts: boom"}},
		{name: "a terminal error is not retried", results: []error{typed.Terminal(boom)}, want: 1,
			wantErrs: []string{"terminal: boom"}},
		{name: "requeue-after reconciles again", results: []error{nil, nil}, requeue: time.Millisecond, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[obj, list](cm("a", "1"))
			var attempts atomic.Int32
			got := newCalls()
			var errsMu sync.Mutex
			var errs []string
			harness(t, src, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
				defer got.add("attempt")
				if req.Key != "ns/a" {
					return typed.Result{}, nil
				}
				n := int(attempts.Add(1))
				if n > len(tt.results) {
					return typed.Result{}, nil
				}
				if n < len(tt.results) || tt.results[n-1] != nil {
					return typed.Result{RequeueAfter: tt.requeue}, tt.results[n-1]
				}
				return typed.Result{}, nil
			}), typed.Options{RateLimiter: fastRetries, MaxRetries: tt.maxRetries, OnError: func(_ context.Context, _ string, err error) {
				errsMu.Lock()
				errs = append(errs, err.Error())
				errsMu.Unlock()
			}})
			got.wait(t, tt.want)
			// A further reconcile would show up here: trigger an unrelated key and wait for it.
			if _, err := src.Create(cm("z", "1")); err != nil {
				t.Fatal(err)
			}
			got.wait(t, tt.want+1)
			if n := int(attempts.Load()); n != tt.want {
				t.Errorf("reconciled ns/a %d times, want %d", n, tt.want)
			}
			errsMu.Lock()
			defer errsMu.Unlock()
			if diff := cmp.Diff(tt.wantErrs, errs); diff != "" {
				t.Errorf("reported errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeyIsNeverReconciledByTwoWorkersAtOnce(t *testing.T) {
	src := fake.New[obj, list](cm("a", "0"), cm("b", "0"))
	var mu sync.Mutex
	active := map[string]bool{}
	overlap := false
	done := newCalls()
	harness(t, src, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		mu.Lock()
		if active[req.Key] {
			overlap = true
		}
		active[req.Key] = true
		mu.Unlock()
		time.Sleep(time.Millisecond) // widen the window for a second worker to collide
		mu.Lock()
		active[req.Key] = false
		mu.Unlock()
		if !req.Deleted && req.Object.Data["v"] == "50" {
			done.add(req.Key)
		}
		return typed.Result{}, nil
	}), typed.Options{Workers: 4})
	for i := 1; i <= 50; i++ {
		for _, name := range []string{"a", "b"} {
			o, _ := src.Get("ns", name)
			o.Data["v"] = string(rune('0'+i/10)) + string(rune('0'+i%10))
			if i == 50 {
				o.Data["v"] = "50"
			}
			if _, err := src.Update(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	done.wait(t, 2)
	mu.Lock()
	defer mu.Unlock()
	if overlap {
		t.Error("a key was reconciled by two workers at once")
	}
}

func TestShutdownLetsInFlightReconcileFinish(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	started, finished := make(chan struct{}), make(chan struct{})
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(ctx context.Context, _ typed.Request[obj]) (typed.Result, error) {
		close(started)
		<-ctx.Done()
		close(finished)
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cctx, ccancel := context.WithCancel(context.Background())
	cdone := make(chan struct{})
	go func() { defer close(cdone); _ = c.Run(cctx) }()
	defer func() {
		ccancel()
		receive(t, cdone, "the controller's Run returns once cancelled")
		verifyNoLeaks(t)
	}()
	ldone := make(chan struct{})
	go func() { defer close(ldone); _ = l.Run(ctx) }()
	receive(t, started, "the reconcile starts")
	cancel()
	receive(t, ldone, "Loop.Run returns once the in-flight reconcile finished")
	select {
	case <-finished:
	default:
		t.Error("Loop.Run returned before the in-flight reconcile finished")
	}
}

func TestPanickingReconcilerIsRecoveredAndRetried(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	var attempts atomic.Int32
	got := newCalls()
	errs := make(chan error, 10)
	harness(t, src, typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		defer got.add("attempt")
		if attempts.Add(1) == 1 {
			panic("boom")
		}
		return typed.Result{}, nil
	}), typed.Options{RateLimiter: fastRetries, OnError: func(_ context.Context, _ string, err error) { errs <- err }})
	got.wait(t, 2)
	var perr *controller.PanicError
	if err := receive(t, errs, "the panic is reported"); !errors.As(err, &perr) || perr.Kind != "reconcile" || perr.Key != "ns/a" {
		t.Errorf("reported %v, want a reconcile PanicError for ns/a", err)
	}
}
