package typed_test

// Tests that attack read-your-writes (DESIGN 19): a key is not reconciled from a cache
// older than its own last write, a waiting key holds no worker and grows no backoff, the
// wait is seen when it lasts, and a Run reconciles nothing before its caches pass the
// fence.

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/consistency"
)

// runSyncedThenTakeOver runs c until the test ends and returns once it has synced; the
// returned function starts l, as a replica taking over with a warm cache does.
func runSyncedThenTakeOver(t *testing.T, c *controller.Controller[obj, list], l *typed.Loop[obj]) (takeOver func()) {
	t.Helper()
	start := make(chan struct{})
	ctx := runUntilEnd(context.Background(), t, c.Run, func(ctx context.Context) error {
		select {
		case <-start:
			return l.Run(ctx)
		case <-ctx.Done():
			return nil
		}
	})
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return func() { close(start) }
}

func newLoop(t *testing.T, src typed.Source[obj], r typed.ReconcilerFunc[obj], opts typed.Options) *typed.Loop[obj] {
	t.Helper()
	l, err := typed.NewLoop(src, r, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// counting is a reconciler that, like a controller creating a child it does not see,
// raises a's count by one when the cache shows it below want, and records what it read.
type counting struct {
	lw   *fake.ListerWatcher[obj, list]
	want atomic.Int32
	mu   sync.Mutex
	seen []string // per reconcile of a: the count the cache showed
	b    atomic.Int32
}

func (r *counting) reconcile(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
	if req.Name != "a" {
		r.b.Add(1)
		return typed.Result{}, nil
	}
	r.mu.Lock()
	r.seen = append(r.seen, req.Object.Data["v"])
	r.mu.Unlock()
	n, _ := strconv.Atoi(req.Object.Data["v"])
	if n >= int(r.want.Load()) {
		return typed.Result{}, nil
	}
	next := req.Object.DeepCopy()
	next.Data["v"] = strconv.Itoa(n + 1)
	written, err := r.lw.Update(next)
	if err != nil {
		return typed.Result{}, err
	}
	consistency.Wrote(ctx, written)
	return typed.Result{}, nil
}

func (r *counting) reads() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// The Sieve class of stale-state bugs: a reconcile computes from a cache that does not
// yet show its own last write. With the watch held back after the first reconcile's
// write, the key is asked for again; by default it waits, holding no worker (b is
// reconciled meanwhile with one worker), and its next reconcile reads its write. With
// read-your-writes off the same test reads the stale count, so it can tell.
func TestAKeyIsNotReconciledFromACacheOlderThanItsOwnLastWrite(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "DisableReadYourWrites"}[off], func(t *testing.T) {
			lw := fake.New[obj, list](cm("a", "0"), cm("b", "0"))
			c := testctl.New(t, lw, controller.Options[obj]{})
			r := &counting{lw: lw}
			r.want.Store(1)
			var whens atomic.Int32
			limiter := whenCounter{workqueue.DefaultTypedControllerRateLimiter[string](), &whens}
			l := newLoop(t, c, r.reconcile, typed.Options{Workers: 1, DisableReadYourWrites: off, RateLimiter: limiter})
			runUntilCleanup(context.Background(), t, lw, c, l)
			// Reads 0 and writes 1, then reads 1 from its write's event.
			eventually(t, "a at 1, read back", func() bool { got := r.reads(); return len(got) >= 2 && got[len(got)-1] == "1" })
			eventually(t, "b reconciled once", func() bool { return r.b.Load() == 1 })

			lw.HoldWatches()
			r.want.Store(2)
			l.Enqueue("ns/a") // reads 1, writes 2, which the cache cannot show
			eventually(t, "the reconcile that writes 2", func() bool { return len(r.reads()) >= 3 })
			l.Enqueue("ns/a")
			l.Enqueue("ns/b")
			eventually(t, "b reconciled while a waits", func() bool { return r.b.Load() == 2 })
			if off {
				eventually(t, "a reconciled from the stale cache", func() bool { return len(r.reads()) >= 4 })
				if got := r.reads()[3]; got != "1" {
					t.Fatalf("with read-your-writes off, the reconcile read %s; want the stale 1", got)
				}
				lw.ReleaseWatches()
				return
			}
			time.Sleep(50 * time.Millisecond) // a reconcile that is wrongly due would start now
			if got := r.reads(); len(got) != 3 {
				t.Fatalf("a was reconciled from a cache that has not applied its write: reads %v", got)
			}
			lw.ReleaseWatches()
			eventually(t, "a reconciled once its write is applied", func() bool { return len(r.reads()) >= 4 })
			if got := r.reads(); got[3] != "2" {
				t.Fatalf("the reconcile after the wait read %v; want its own write, 2, last", got)
			}
			if n := whens.Load(); n != 0 {
				t.Fatalf("the rate limiter was asked %d times: a waiting key must not back off", n)
			}
		})
	}
}

// whenCounter counts the retries a rate limiter is asked for.
type whenCounter struct {
	workqueue.TypedRateLimiter[string]
	n *atomic.Int32
}

func (w whenCounter) When(key string) time.Duration {
	w.n.Add(1)
	return w.TypedRateLimiter.When(key)
}

// A deletion whose response carries no object is waited for by UID: the key is not
// reconciled while the cache still holds the deleted object.
func TestADeletionIsWaitedForUntilTheCacheNoLongerHoldsTheObject(t *testing.T) {
	lw := fake.New[obj, list](cm("a", "0"), cm("child", "0"))
	c := testctl.New(t, lw, controller.Options[obj]{})
	var reconciles atomic.Int32
	var sawChild atomic.Bool
	l := newLoop(t, c, func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		if req.Name != "a" {
			return typed.Result{}, nil
		}
		if reconciles.Add(1) == 1 {
			child, _ := c.Get("ns/child")
			if _, err := lw.Delete("ns", "child"); err != nil {
				return typed.Result{}, err
			}
			consistency.Deleted(ctx, child)
			return typed.Result{}, nil
		}
		_, ok := c.Get("ns/child")
		sawChild.Store(ok)
		return typed.Result{}, nil
	}, typed.Options{})
	lw.HoldWatches()
	runUntilCleanup(context.Background(), t, lw, c, l)
	eventually(t, "the first reconcile", func() bool { return reconciles.Load() == 1 })
	l.Enqueue("ns/a")
	time.Sleep(50 * time.Millisecond)
	if n := reconciles.Load(); n != 1 {
		t.Fatalf("a reconciled %d times while the cache still held the child it deleted", n)
	}
	lw.ReleaseWatches()
	eventually(t, "the second reconcile", func() bool { return reconciles.Load() >= 2 })
	if sawChild.Load() {
		t.Fatal("the reconcile after the wait still saw the deleted child")
	}
}

// consistencyMetrics records what read-your-writes reports.
type consistencyMetrics struct {
	countingMetrics
	mu      sync.Mutex
	waiting []int
	waits   []time.Duration
	bounds  atomic.Int32
	fences  atomic.Int32
}

func (m *consistencyMetrics) KeysWaiting(_ string, n int) {
	m.mu.Lock()
	m.waiting = append(m.waiting, n)
	m.mu.Unlock()
}

func (m *consistencyMetrics) WriteWait(_ string, d time.Duration) {
	m.mu.Lock()
	m.waits = append(m.waits, d)
	m.mu.Unlock()
}

func (m *consistencyMetrics) StaleBoundHit(string) { m.bounds.Add(1) }

func (m *consistencyMetrics) FenceDuration(string, time.Duration) { m.fences.Add(1) }

// A wait that lasts is seen: at StaleBound the Loop reports it (and logs it) and keeps the
// key waiting, fail-closed; the cache's bookmark then lets it go, and the wait's length is
// reported.
func TestAWaitPastTheBoundIsReportedAndEndsWithTheCachesProgress(t *testing.T) {
	lw := fake.New[obj, list](cm("a", "0"))
	c := testctl.New(t, lw, controller.Options[obj]{})
	clk := testingclock.NewFakeClock(time.Now())
	m := &consistencyMetrics{}
	var reconciles atomic.Int32
	l := newLoop(t, c, func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		if reconciles.Add(1) == 1 {
			// A write the cache never sees as an event, as when the object is outside its
			// selector: only a bookmark moves it past.
			other := cm("elsewhere", "x")
			other.ResourceVersion = "1000"
			consistency.Wrote(ctx, other)
		}
		return typed.Result{}, nil
	}, typed.Options{Clock: clk, Metrics: m, StaleBound: time.Second})
	runUntilCleanup(context.Background(), t, lw, c, l)
	eventually(t, "the first reconcile", func() bool { return reconciles.Load() == 1 })
	l.Enqueue("ns/a")
	eventually(t, "a waiting", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.waiting) > 0 && m.waiting[len(m.waiting)-1] == 1
	})
	eventually(t, "the bound hit", func() bool {
		clk.Step(time.Second)
		return m.bounds.Load() >= 1
	})
	if n := reconciles.Load(); n != 1 {
		t.Fatalf("reconciled %d times: past the bound the key must keep waiting", n)
	}
	for range 1000 {
		if _, err := lw.Update(cm("a", "0")); err != nil {
			t.Fatal(err)
		}
	}
	lw.SendBookmark()
	eventually(t, "a reconciled after the bookmark", func() bool { return reconciles.Load() >= 2 })
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.waits) != 1 || m.waits[0] < time.Second || m.waiting[len(m.waiting)-1] != 0 {
		t.Fatalf("waits %v, keys waiting %v; want one wait of at least the bound, and 0 waiting", m.waits, m.waiting)
	}
}

// A replica that takes over (a new term as leader) must not act on a cache older than
// the previous holder's last writes: its Run reconciles nothing until each cache has
// reached a consistent read taken as it starts. Here the cache, synced and warm, has not
// seen the last write when the Loop starts; the first reconcile waits for it and reads it.
func TestARunReconcilesNothingBeforeItsCachesReachAConsistentReadTakenAsItStarts(t *testing.T) {
	lw := fake.New[obj, list](cm("a", "0"))
	c := testctl.New(t, lw, controller.Options[obj]{})
	var read atomic.Value
	m := &consistencyMetrics{}
	l := newLoop(t, c, func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		read.CompareAndSwap(nil, req.Object.Data["v"])
		return typed.Result{}, nil
	}, typed.Options{Metrics: m})
	takeOver := runSyncedThenTakeOver(t, c, l)
	lw.HoldWatches()
	if _, err := lw.Update(cm("a", "1")); err != nil { // the previous leader's last write
		t.Fatal(err)
	}
	takeOver()
	time.Sleep(50 * time.Millisecond) // a reconcile wrongly started would have read by now
	if v := read.Load(); v != nil {
		t.Fatalf("reconciled before the cache reached the consistent point, reading %v", v)
	}
	lw.ReleaseWatches()
	eventually(t, "the first reconcile", func() bool { return read.Load() != nil })
	if v := read.Load(); v != "1" {
		t.Fatalf("the first reconcile read %v; want the last write, 1", v)
	}
	if m.fences.Load() != 1 {
		t.Fatalf("FenceDuration reported %d times; want 1", m.fences.Load())
	}
}

// A cache that neither holds nor selects a written object has nothing of the write to
// show, and is not waited for: a parent's status write waits for the parents' cache,
// not for the children's, whose selector leaves parents out and whose watch would carry
// nothing past it until a bookmark.
func TestACacheThatCannotShowAWrittenObjectIsNotWaitedFor(t *testing.T) {
	lw := fake.New[obj, list](labelled(cm("p", "0"), "parent"), labelled(cm("c", "0"), "child"))
	selecting := func(role string) controller.Options[obj] {
		return controller.Options[obj]{Options: reflect.Options[obj]{ListOptions: func(o *metav1.ListOptions) { o.LabelSelector = "role=" + role }}}
	}
	parents, children := testctl.New(t, lw, selecting("parent")), testctl.New(t, lw, selecting("child"))
	m := &consistencyMetrics{}
	var reads atomic.Int32
	l := newLoop(t, parents, func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		if reads.Add(1) == 1 {
			next := req.Object.DeepCopy()
			next.Data["v"] = "1"
			written, err := lw.Update(next)
			if err != nil {
				return typed.Result{}, err
			}
			consistency.Wrote(ctx, written)
		}
		return typed.Result{}, nil
	}, typed.Options{Metrics: m})
	if err := typed.Related(l, children, func(obj) []string { return []string{"ns/p"} }); err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, parents.Run, children.Run, l.Run)
	eventually(t, "the write read back", func() bool { return reads.Load() >= 2 })
	if n := m.bounds.Load(); n != 0 {
		t.Fatalf("the key waited past the bound %d times: it waited for the children's cache", n)
	}
}

func labelled(o obj, role string) obj {
	o.Labels = map[string]string{"role": role}
	return o
}

// DESIGN 19 under concurrent writes: a reconcile that writes several objects from
// goroutines of its own records every write, and its key waits for the newest; its next
// reconcile reads them all.
func TestWritesFromGoroutinesOfOneReconcileAreAllWaitedFor(t *testing.T) {
	const children = 8
	objs := []obj{cm("a", "0")}
	for i := range children {
		objs = append(objs, cm("c"+strconv.Itoa(i), "0"))
	}
	lw := fake.New[obj, list](objs...)
	c := testctl.New(t, lw, controller.Options[obj]{})
	var reconciles atomic.Int32
	var sawAll atomic.Bool
	l := newLoop(t, c, func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		if req.Name != "a" {
			return typed.Result{}, nil
		}
		if reconciles.Add(1) == 1 {
			lw.HoldWatches()
			var wg sync.WaitGroup
			for i := range children {
				wg.Go(func() {
					written, err := lw.Update(cm("c"+strconv.Itoa(i), "1"))
					if err == nil {
						consistency.Wrote(ctx, written)
					}
				})
			}
			wg.Wait()
			return typed.Result{}, nil
		}
		all := true
		for i := range children {
			if got, _ := c.Get("ns/c" + strconv.Itoa(i)); got.Data["v"] != "1" {
				all = false
			}
		}
		sawAll.Store(all)
		return typed.Result{}, nil
	}, typed.Options{Workers: 2})
	runUntilCleanup(context.Background(), t, lw, c, l)
	eventually(t, "the writing reconcile", func() bool { return reconciles.Load() == 1 })
	l.Enqueue("ns/a")
	time.Sleep(50 * time.Millisecond) // a reconcile wrongly due would start now
	if n := reconciles.Load(); n != 1 {
		t.Fatalf("a reconciled %d times before its writes were applied", n)
	}
	lw.ReleaseWatches()
	eventually(t, "the next reconcile", func() bool { return reconciles.Load() >= 2 })
	if !sawAll.Load() {
		t.Fatal("the reconcile after the wait did not read every write of the one before")
	}
}

// DESIGN 19 with a server that vanishes as a Run starts: the fence's consistent read
// fails, is tried again (after 1 s, then 2 s), and nothing is reconciled before it
// succeeds, rather than the Run going on unfenced.
func TestARunWhoseFenceCannotReadTheServerWaitsAndTriesAgain(t *testing.T) {
	lw := fake.New[obj, list](cm("a", "0"))
	c := testctl.New(t, lw, controller.Options[obj]{})
	var reconciled atomic.Int32
	fenceReads := func() int {
		n := 0
		for _, a := range lw.Actions() {
			if a.Verb == fake.VerbList && a.Options.Limit == 1 {
				n++
			}
		}
		return n
	}
	var readsAtFirstReconcile atomic.Int32
	l := newLoop(t, c, func(context.Context, typed.Request[obj]) (typed.Result, error) {
		if reconciled.Add(1) == 1 {
			readsAtFirstReconcile.Store(int32(fenceReads()))
		}
		return typed.Result{}, nil
	}, typed.Options{})
	takeOver := runSyncedThenTakeOver(t, c, l)
	lw.FailList(2, apierrors.NewServiceUnavailable("the server is restarting"))
	takeOver()
	eventually(t, "the first reconcile", func() bool { return reconciled.Load() >= 1 })
	if n := readsAtFirstReconcile.Load(); n != 3 {
		t.Fatalf("the first reconcile came after %d fence reads; want 3: two refused, one answered", n)
	}
}
