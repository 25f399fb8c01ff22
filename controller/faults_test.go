package controller_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

// serverState is what a fresh List returns, as key -> resource version.
func serverState(t *testing.T, src *fake.ListerWatcher[obj, list]) map[string]string {
	t.Helper()
	l, err := src.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range l.Items {
		out[o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	return out
}

// gated is a ListerWatcher whose watches can be held back, so that a test can change
// things while the controller has no watch open.
type gated struct {
	*fake.ListerWatcher[obj, list]
	mu      sync.Mutex
	open    chan struct{}
	listing chan struct{}
}

func (g *gated) hold() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gated) release() {
	g.mu.Lock()
	close(g.open)
	g.open = nil
	g.mu.Unlock()
}

// blockLists makes every later List wait until its context ends, like a relist against a
// server that stopped answering; the returned channel is closed when the first such List
// begins.
func (g *gated) blockLists() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.listing = make(chan struct{})
	return g.listing
}

func (g *gated) List(ctx context.Context, opts metav1.ListOptions) (list, error) {
	g.mu.Lock()
	listing := g.listing
	if listing != nil {
		select {
		case <-listing: // closed by an earlier List
		default:
			close(listing)
		}
	}
	g.mu.Unlock()
	if listing != nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return g.ListerWatcher.List(ctx, opts)
}

func (g *gated) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open != nil {
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.ListerWatcher.Watch(ctx, opts)
}

// faultRun is one run of the fault matrix: a controller with a checking handler over a
// fake server that a churn of creations, updates and deletions changes while a fault is
// injected.
type faultRun struct {
	src *fake.ListerWatcher[obj, list]
	lw  *gated
	c   *controller.Controller[obj, list]
	chk *eventcheck.Checker[obj]
	rng *rand.Rand
	errorLog
}

// errorLog collects the errors a controller reports, as its Options.OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(_ context.Context, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func (r *faultRun) churn(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		name := "cm-" + strconv.Itoa(r.rng.IntN(40))
		ns := []string{"a", "b"}[r.rng.IntN(2)]
		cur, exists := r.src.Get(ns, name)
		var err error
		switch {
		case !exists:
			_, err = r.src.Create(cm(ns, name, nil))
		case r.rng.IntN(4) == 0:
			_, err = r.src.Delete(ns, name)
		default:
			cur.Data = map[string]string{"i": strconv.Itoa(i)}
			_, err = r.src.Update(cur)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// converge waits until the controller's known objects equal a fresh List, then checks
// that the handler followed every change consistently and holds the same state.
func (r *faultRun) converge(t *testing.T) {
	t.Helper()
	var want, got map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		want = serverState(t, r.src)
		got = map[string]string{}
		r.c.Store().Range(func(k string, o obj) bool { got[k] = o.ResourceVersion; return true })
		return cmp.Equal(want, got) && cmp.Equal(want, r.chk.Versions()), nil
	})
	if err != nil {
		t.Fatalf("the cache did not converge on the server's state (-server +cache):\n%s", cmp.Diff(want, got))
	}
	r.chk.Verify(t)
}

func startFaultRun(t *testing.T) *faultRun {
	t.Helper()
	r := &faultRun{src: fake.New[obj, list](), chk: eventcheck.New[obj]("checker"), rng: rand.New(rand.NewPCG(1, 2))}
	r.lw = &gated{ListerWatcher: r.src}
	r.churn(t, 30)
	r.c = testctl.New(t, r.lw, controller.Options[obj]{
		Options: reflect.Options[obj]{
			Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 1 << 20, Cap: 20 * time.Millisecond},
			OnError: r.add,
		},
	})
	mustAdd(t, r.c, "checker", r.chk)
	return r
}

func (r *faultRun) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		goleak.VerifyNone(t)
	})
}

func TestFaultMatrix(t *testing.T) {
	stale := cm("a", "stale", nil)
	tests := []struct {
		name string
		// before runs before the controller starts; during, in the middle of the churn.
		before func(t *testing.T, r *faultRun)
		during func(t *testing.T, r *faultRun)
		// reported, when set, must hold for some reported error.
		reported func(err error) bool
	}{
		{name: "watch closed mid-stream", during: func(_ *testing.T, r *faultRun) { r.src.CloseWatches() }},
		{name: "watch ending with 410 Gone while objects change", during: func(t *testing.T, r *faultRun) {
			r.lw.hold()
			r.src.CloseWatches()
			r.churn(t, 40)
			r.src.Compact()
			r.lw.release()
		}, reported: apierrors.IsResourceExpired},
		{name: "list failing 3 times", before: func(_ *testing.T, r *faultRun) {
			r.src.FailList(3, apierrors.NewInternalError(errors.New("etcd is sad")))
		}, reported: apierrors.IsInternalError},
		{name: "429 from the watch", during: func(_ *testing.T, r *faultRun) {
			r.src.FailWatch(2, apierrors.NewTooManyRequests("slow down", 1))
			r.src.CloseWatches()
		}, reported: apierrors.IsTooManyRequests},
		{name: "500 from the watch", during: func(_ *testing.T, r *faultRun) {
			r.src.FailWatch(2, apierrors.NewInternalError(errors.New("boom")))
			r.src.CloseWatches()
		}, reported: apierrors.IsInternalError},
		{name: "watch ERROR event carrying a Status", during: func(_ *testing.T, r *faultRun) {
			r.src.Send(watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Code: 500,
				Reason: metav1.StatusReasonInternalError, Message: "the watch cache is resizing"}})
		}, reported: func(err error) bool { return errors.Is(err, reflect.ErrWatchEvent) && apierrors.IsInternalError(err) }},
		{name: "duplicate and out-of-order resource versions", during: func(t *testing.T, r *faultRun) {
			created, err := r.src.Create(stale.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			updated := created.DeepCopy()
			updated.Data = map[string]string{"v": "2"}
			if updated, err = r.src.Update(updated); err != nil {
				t.Fatal(err)
			}
			r.src.Send(watch.Event{Type: watch.Modified, Object: updated}) // duplicate
			r.src.Send(watch.Event{Type: watch.Modified, Object: created}) // older
		}},
		{name: "object of the wrong type", during: func(_ *testing.T, r *faultRun) {
			r.src.Send(watch.Event{Type: watch.Added, Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}})
		}, reported: func(err error) bool { return errors.Is(err, reflect.ErrUnexpectedObject) }},
		{name: "nil object", during: func(_ *testing.T, r *faultRun) {
			r.src.Send(watch.Event{Type: watch.Modified, Object: nil})
		}, reported: func(err error) bool { return errors.Is(err, reflect.ErrUnexpectedObject) }},
		{name: "object with no name", during: func(_ *testing.T, r *faultRun) {
			r.src.Send(watch.Event{Type: watch.Added, Object: cm("a", "", nil)})
		}, reported: func(err error) bool { return errors.Is(err, event.ErrNoName) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startFaultRun(t)
			if tt.before != nil {
				tt.before(t, r)
			}
			r.run(t)
			if err := r.c.WaitForSync(context.Background()); err != nil {
				t.Fatal(err)
			}
			_ = r.src.WaitForWatchers(context.Background(), 1)
			r.churn(t, 100)
			if tt.during != nil {
				tt.during(t, r)
			}
			r.churn(t, 100)
			r.converge(t)
			if tt.reported != nil && !slices.ContainsFunc(r.errors(), tt.reported) {
				t.Errorf("no reported error matched; reported: %v", r.errors())
			}
		})
	}
}

func TestFaultPanickingAndBlockedHandlersDoNotHurtOthers(t *testing.T) {
	r := startFaultRun(t)
	release := make(chan struct{})
	defer close(release)
	var calls int
	panicky := controller.HandlerFunc[obj](func(context.Context, event.Event[obj]) {
		calls++
		if calls%3 == 0 {
			panic("every third event")
		}
	})
	mustAdd(t, r.c, "panicky", panicky)
	blocked := mustAdd(t, r.c, "blocked", controller.HandlerFunc[obj](func(context.Context, event.Event[obj]) { <-release }))
	r.run(t)
	_ = r.src.WaitForWatchers(context.Background(), 1)
	r.churn(t, 500)
	r.converge(t)
	var panics int
	for _, err := range r.errors() {
		var p *controller.PanicError
		if errors.As(err, &p) && p.Kind == "handler" && p.Name == "panicky" {
			panics++
		}
	}
	if panics == 0 {
		t.Error("no PanicError was reported")
	}
	// A key waits at most once in the batch the handler took and once in its backlog.
	if n := blocked.Pending(); n > 2*80 {
		t.Errorf("the blocked handler's backlog holds %d keys, more than twice the 80 keys there are", n)
	}
}

// TestFaultCancelledInTheMiddleOfARelist syncs, loses its watch to 410 Gone while objects
// change, and has its context cancelled while the relist's List is still waiting on the
// server. Run must return with no goroutine left, and the aborted relist must have
// changed nothing: the known objects and the handler still hold the state from before
// the watch was lost, consistently.
func TestFaultCancelledInTheMiddleOfARelist(t *testing.T) {
	r := startFaultRun(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.c.Run(ctx) }()
	_ = r.src.WaitForWatchers(ctx, 1)
	r.churn(t, 100)
	r.converge(t)
	before := serverState(t, r.src)

	listing := r.lw.blockLists()
	r.lw.hold()
	r.src.CloseWatches()
	r.churn(t, 100)
	r.src.Compact()
	r.lw.release()
	select {
	case <-listing:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller did not relist after 410 Gone")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context was cancelled in the middle of a relist")
	}
	got := map[string]string{}
	r.c.Store().Range(func(k string, o obj) bool { got[k] = o.ResourceVersion; return true })
	if diff := cmp.Diff(before, got); diff != "" {
		t.Errorf("the aborted relist changed the known objects (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(before, r.chk.Versions()); diff != "" {
		t.Errorf("the aborted relist changed what the handler saw (-before +after):\n%s", diff)
	}
	if !r.c.HasSynced() {
		t.Error("HasSynced went back to false: a relist must not unsync a synced controller")
	}
	r.chk.Verify(t)
	if !slices.ContainsFunc(r.errors(), apierrors.IsResourceExpired) {
		t.Errorf("the 410 Gone was not reported; reported: %v", r.errors())
	}
	goleak.VerifyNone(t)
}

// TestFaultNoListPermissionBacksOffAndNeverSyncs: a user who may not list gets the
// server's Forbidden through the error hook, one List per backoff step on a fake clock (no
// hot loop), never a synced controller, and no objects or events.
func TestFaultNoListPermissionBacksOffAndNeverSyncs(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	src := fake.New[obj, list](cm("a", "x", nil))
	src.FailList(1<<30, apierrors.NewForbidden(corev1.Resource("configmaps"), "", errors.New("user cannot list")))
	errs := make(chan error, 100)
	c := testctl.New(t, src, controller.Options[obj]{Options: reflect.Options[obj]{Clock: clk, OnError: func(_ context.Context, err error) { errs <- err }}})
	chk := eventcheck.New[obj]("checker")
	mustAdd(t, c, "checker", chk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		goleak.VerifyNone(t)
	}()
	for i := 1; i <= 3; i++ {
		select {
		case err := <-errs:
			if !apierrors.IsForbidden(err) {
				t.Fatalf("reported %v, want a Forbidden error", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("List %d: no error was reported", i)
		}
		// The reflector now waits on the clock: nothing happens until it moves.
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return clk.HasWaiters(), nil }); err != nil {
			t.Fatal(err)
		}
		if got := src.ListCalls(); got != i {
			t.Fatalf("ListCalls() = %d before the backoff elapsed, want %d", got, i)
		}
		if c.HasSynced() {
			t.Fatal("HasSynced without permission to list")
		}
		clk.Step(time.Minute)
	}
	if n := c.Store().Len(); n != 0 {
		t.Errorf("the store holds %d objects without permission to list", n)
	}
	if n := chk.Count(); n != 0 {
		t.Errorf("the handler got %d events without permission to list", n)
	}
	chk.Verify(t)
}
