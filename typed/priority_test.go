package typed_test

// Tests of the Loop's priorities: keys of live changes before keys from lists and
// resyncs, without starving the latter, and with every guarantee of a workqueue kept.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
)

// handedOut is a key as the queue hands it out.
type handedOut struct {
	Key  string
	Live bool
}

// drain gets every queued key, marking each done at once, and returns them in order.
func drain(q typed.Queue) []handedOut {
	var out []handedOut
	for q.Len() > 0 {
		key, live, _ := q.Get()
		q.Done(key)
		out = append(out, handedOut{key, live})
	}
	return out
}

func TestQueueHandsOutLiveKeysFirstAndEachKeyOnce(t *testing.T) {
	type add struct {
		key  string
		live bool
	}
	tests := []struct {
		name string
		adds []add
		want []handedOut
	}{
		{
			name: "live keys before sync keys, each in the order queued",
			adds: []add{{"s1", false}, {"l1", true}, {"s2", false}, {"l2", true}},
			want: []handedOut{{"l1", true}, {"l2", true}, {"s1", false}, {"s2", false}},
		},
		{
			name: "a sync key that changes live moves behind the live keys",
			adds: []add{{"a", false}, {"b", false}, {"l", true}, {"c", false}, {"b", true}},
			want: []handedOut{{"l", true}, {"b", true}, {"a", false}, {"c", false}},
		},
		{
			name: "a sync event never lowers a live key",
			adds: []add{{"a", true}, {"s", false}, {"a", false}},
			want: []handedOut{{"a", true}, {"s", false}},
		},
		{
			name: "a key queued again keeps its place",
			adds: []add{{"a", true}, {"b", true}, {"a", true}, {"c", false}, {"d", false}, {"c", false}},
			want: []handedOut{{"a", true}, {"b", true}, {"c", false}, {"d", false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := typed.NewQueue()
			for _, a := range tt.adds {
				q.Add(a.key, a.live)
			}
			if diff := cmp.Diff(tt.want, drain(q)); diff != "" {
				t.Errorf("handed out (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQueueAKeyAddedWhileProcessingIsHandedOutAgainOnlyOnceDone(t *testing.T) {
	q := typed.NewQueue()
	q.Add("a", false)
	q.Add("b", false)
	key, _, _ := q.Get() // a is being processed
	q.Add(key, true)     // a live change meanwhile
	q.Add(key, false)
	var got []handedOut
	next, live, _ := q.Get()
	got = append(got, handedOut{next, live}) // not a: it is still being processed
	q.Done(key)
	got = append(got, drain(q)...)
	q.Done(next)
	want := []handedOut{{"b", false}, {"a", true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("handed out (-want +got):\n%s", diff)
	}
	if q.Len() != 0 || q.Pending("a") || q.Pending("b") {
		t.Errorf("after everything is done: %d keys queued, a pending %v, b pending %v; want nothing", q.Len(), q.Pending("a"), q.Pending("b"))
	}
}

func TestQueueHandsOutASyncKeyAfterAtMostLiveInARowLiveKeys(t *testing.T) {
	q := typed.NewQueue()
	const syncKeys = 3
	for i := range syncKeys {
		q.Add(fmt.Sprint("s", i), false)
	}
	// Two live keys are always waiting: each one handed out is queued again at once.
	q.Add("l0", true)
	q.Add("l1", true)
	var got, want []handedOut
	for range syncKeys {
		for i := range typed.LiveInARow {
			want = append(want, handedOut{fmt.Sprint("l", i%2), true})
		}
		want = append(want, handedOut{fmt.Sprint("s", len(want)/(typed.LiveInARow+1)), false})
	}
	for range len(want) {
		key, live, _ := q.Get()
		q.Done(key)
		if live {
			q.Add(key, true)
		}
		got = append(got, handedOut{key, live})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("handed out under a stream of live keys (-want +got):\n%s", diff)
	}
}

func TestQueueShutDownReleasesEveryGetAndHandsOutNothingMore(t *testing.T) {
	q := typed.NewQueue()
	const getters = 4
	results := make(chan bool, getters)
	var wg sync.WaitGroup
	for range getters {
		wg.Go(func() {
			_, _, shutdown := q.Get()
			results <- shutdown
		})
	}
	q.ShutDown()
	wg.Wait()
	close(results)
	for shutdown := range results {
		if !shutdown {
			t.Error("a Get blocked on an empty queue returned a key after ShutDown")
		}
	}
	q.Add("a", true)
	if key, _, shutdown := q.Get(); !shutdown || q.Len() != 0 {
		t.Errorf("after ShutDown: Get = %q, shutdown %v, %d queued; want shutdown and nothing queued", key, shutdown, q.Len())
	}
	verifyNoLeaks(t)
}

// Concurrent adders and workers: no key is ever processed by two workers at once, and
// every Add is followed by a processing of its key that sees it.
func TestQueueConcurrentAddsNeverLoseAKeyNorProcessItTwiceAtOnce(t *testing.T) {
	const keys, adders, addsEach, workers = 10, 4, 500, 4
	q := typed.NewQueue()
	var version [keys]atomic.Int64 // bumped before each Add of the key
	var seen [keys]atomic.Int64    // the newest version a worker saw, read after Get
	var active [keys]atomic.Int32
	var overlaps atomic.Int32
	var workersWG sync.WaitGroup
	for range workers {
		workersWG.Go(func() {
			for {
				key, _, shutdown := q.Get()
				if shutdown {
					return
				}
				var i int
				_, _ = fmt.Sscan(key, &i)
				if active[i].Add(1) > 1 {
					overlaps.Add(1)
				}
				seen[i].Store(version[i].Load())
				active[i].Add(-1)
				q.Done(key)
			}
		})
	}
	var addersWG sync.WaitGroup
	for a := range adders {
		addersWG.Go(func() {
			for n := range addsEach {
				i := (a + n) % keys
				version[i].Add(1)
				q.Add(fmt.Sprint(i), n%3 == 0)
			}
		})
	}
	addersWG.Wait()
	eventually(t, "every key is processed", func() bool {
		for i := range keys {
			if q.Pending(fmt.Sprint(i)) {
				return false
			}
		}
		return true
	})
	q.ShutDown()
	workersWG.Wait()
	for i := range keys {
		if seen[i].Load() != version[i].Load() {
			t.Errorf("key %d: last processing saw version %d of %d", i, seen[i].Load(), version[i].Load())
		}
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d times a key was processed by two workers at once", overlaps.Load())
	}
	verifyNoLeaks(t)
}

// reconcileOrder records the keys a Loop reconciles, in order, without a bound.
type reconcileOrder struct {
	mu   sync.Mutex
	keys []string
}

func (r *reconcileOrder) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
}

func (r *reconcileOrder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

// A startup list of 100,000 keys delays a live change by at most the reconciles already
// running, one per worker, even when the changed key was queued by the list.
func TestLoopReconcilesALiveChangeBeforeAStartupListOf100000Keys(t *testing.T) {
	const keys = 100_000
	objs := make([]obj, keys)
	for i := range objs {
		objs[i] = cm(fmt.Sprintf("k%06d", i), "1")
	}
	src := fake.New[obj, list](objs...)
	c := testctl.New(t, src, controller.Options[obj]{Options: reflect.Options[obj]{PageSize: keys}}) // the fake sorts every key for each page
	_ = runUntilEnd(context.Background(), t, c.Run)                                                  // and checks for leaks once the subtests are done
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) {
			var (
				held, ahead reconcileOrder
				live        string // set while every worker is held, read after
				l           *typed.Loop[obj]
				err         error
			)
			value := fmt.Sprint(workers, " workers") // unlike what an earlier subtest wrote to the key
			blocked, release := make(chan struct{}, workers), make(chan struct{})
			liveDone := make(chan struct{})
			var first atomic.Int32
			l, err = typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
				if int(first.Add(1)) <= workers { // every worker holds one list key
					held.add(req.Key)
					blocked <- struct{}{}
					<-release
					return typed.Result{}, nil
				}
				if req.Key == live && req.Object.Data["v"] == value {
					close(liveDone)
					return typed.Result{}, nil
				}
				// The queue hands out a key under its lock, so a list key handed out after
				// the live one finds it gone. Where a reconcile starts is no measure: the
				// worker that took the live key can be descheduled before its reconcile
				// while the others run any number of list keys.
				if liveQueued, _ := l.Queued(); liveQueued != 0 {
					ahead.add(describe(req))
				}
				return typed.Result{}, nil
			}), typed.Options{Workers: workers})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := receive(t, done, "the Loop returns once cancelled"); err != nil {
					t.Errorf("Run: %v", err)
				}
			})
			released := sync.OnceFunc(func() { close(release) })
			t.Cleanup(released) // a failed test must not leave the workers blocked
			for range workers {
				receive(t, blocked, "each worker starts on a key of the list")
			}
			// A key the list queued and no worker holds: the list's order is the fake's
			// or the store's, which need not be sorted.
			for i := keys - 1; live == ""; i-- {
				if key := fmt.Sprintf("ns/k%06d", i); !slices.Contains(held.snapshot(), key) {
					live = key
				}
			}
			o, _ := src.Get(event.SplitKey(live))
			o.Data["v"] = value
			if _, err := src.Update(o); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the live change is queued", func() bool { liveQueued, _ := l.Queued(); return liveQueued == 1 })
			released()
			receive(t, liveDone, "the live change is reconciled")
			// A list key handed out while the live key was queued would be one the live
			// change waits for: a worker free to take the live key took it instead.
			if diff := cmp.Diff([]string(nil), ahead.snapshot()); diff != "" {
				t.Errorf("list keys reconciled while the live change was queued behind them (-want +got):\n%s", diff)
			}
		})
	}
}

// Under a stream of live changes that never lets up, the keys of the startup list still
// get one reconcile in every LiveInARow+1.
func TestLoopReconcilesListKeysUnderAStreamOfLiveChanges(t *testing.T) {
	const listKeys = 5
	var objs []obj
	for i := range listKeys {
		objs = append(objs, cm(fmt.Sprint("s", i), "1"))
	}
	src := fake.New[obj, list](objs...)
	c := testctl.New(t, src, controller.Options[obj]{})
	got := newCalls()
	var listDone atomic.Int32
	var l *typed.Loop[obj]
	hold, held, release := holdReconciles(got, []int32{1}, func(int32, typed.Request[obj]) error { return nil })
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		_, _ = hold.Reconcile(ctx, req) // records the reconcile, and holds the first
		if !strings.HasPrefix(req.Key, "ns/hot-") {
			listDone.Add(1)
			return typed.Result{}, nil
		}
		if listDone.Load() == listKeys {
			return typed.Result{}, nil // the stream ends once the list is done
		}
		// Change the other hot key, and return only once that change is queued, so that
		// a live key is always waiting when the worker takes its next key.
		other := map[string]string{"ns/hot-a": "hot-b", "ns/hot-b": "hot-a"}[req.Key]
		o, _ := src.Get("ns", other)
		o.Data["v"] += "+"
		if _, err := src.Update(o); err != nil {
			return typed.Result{}, err
		}
		for live, _ := l.Queued(); live == 0 && ctx.Err() == nil; live, _ = l.Queued() {
			time.Sleep(time.Millisecond)
		}
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(context.Background(), t, src, c, l)
	receive(t, held, "a list key holds the worker")
	for _, name := range []string{"hot-a", "hot-b"} {
		if _, err := src.Create(cm(name, "")); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the stream's keys are queued", func() bool { live, _ := l.Queued(); return live == 2 })
	release()
	eventually(t, "every list key is reconciled", func() bool { return listDone.Load() == listKeys })
	want := []string{"list"}
	for range listKeys - 1 {
		for range typed.LiveInARow {
			want = append(want, "live")
		}
		want = append(want, "list")
	}
	var kinds []string
	for _, r := range got.wait(t, len(want))[:len(want)] {
		kinds = append(kinds, map[bool]string{true: "live", false: "list"}[strings.HasPrefix(r, "ns/hot-")])
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}

// holdReconciles returns a reconciler that records each reconcile's key and value, holds
// the worker in the reconciles numbered in hold (1 for the first) until released, and
// returns what fail says for a reconcile. The Loop's end releases whatever it holds.
func holdReconciles(got *calls, hold []int32, fail func(n int32, req typed.Request[obj]) error) (typed.Reconciler[obj], <-chan int32, func()) {
	var n atomic.Int32
	held, release := make(chan int32, len(hold)), make(chan struct{}, len(hold))
	return typed.ReconcilerFunc[obj](func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		i := n.Add(1)
		got.add(describe(req))
		if slices.Contains(hold, i) {
			held <- i
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return typed.Result{}, fail(i, req)
	}), held, func() { release <- struct{}{} }
}

func TestLoopRetriesAKeyAtThePriorityItWasReconciledWith(t *testing.T) {
	src := fake.New[obj, list](cm("s0", "1"), cm("s1", "1"), cm("s2", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	clk := testingclock.NewFakeClock(time.Now())
	got := newCalls()
	r, held, release := holdReconciles(got, []int32{1, 3}, func(n int32, req typed.Request[obj]) error {
		if n == 2 {
			return errors.New("boom") // the live key's first reconcile
		}
		return nil
	})
	l, err := typed.NewLoop(c, r, typed.Options{Clock: clk, RateLimiter: &fixedDelay{d: time.Second, requeues: map[string]int{}},
		OnError: func(context.Context, string, error) {}})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(context.Background(), t, src, c, l)
	receive(t, held, "the first list key holds the worker")
	if _, err := src.Create(cm("live", "1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the live key is queued", func() bool { live, _ := l.Queued(); return live == 1 })
	release()
	receive(t, held, "the next list key holds the worker")
	eventually(t, "the failed live key's retry is scheduled", func() bool { return l.ScheduledRetries() == 1 })
	clk.Step(2 * time.Second)
	eventually(t, "the retry is queued as live", func() bool { live, _ := l.Queued(); return live == 1 })
	release()
	want := []string{"list", "ns/live value=1", "list", "ns/live value=1", "list"}
	var all []string
	for _, r := range got.wait(t, len(want)) {
		if strings.HasPrefix(r, "ns/s") {
			r = "list" // the list's keys come in no particular order
		}
		all = append(all, r)
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}

func TestRelatedLiveChangesMoveTheirKeysAheadOfTheList(t *testing.T) {
	primaries := fake.New[obj, list](cm("p0", "1"), cm("p1", "1"), cm("p2", "1"))
	secondaries := fake.New[*corev1.Secret, *corev1.SecretList]()
	pc := testctl.New(t, primaries, controller.Options[obj]{})
	sc := testctl.New(t, secondaries, controller.Options[*corev1.Secret]{})
	got := newCalls()
	r, held, release := holdReconciles(got, []int32{1}, func(int32, typed.Request[obj]) error { return nil })
	l, err := typed.NewLoop(pc, r, typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	typed.Related(l, sc, func(s *corev1.Secret) []string { return []string{"ns/" + s.Labels["owner"]} })
	ctx := runUntilEnd(context.Background(), t, pc.Run, sc.Run, l.Run)
	_ = secondaries.WaitForWatchers(ctx, 1)
	receive(t, held, "a list key holds the worker")
	// The list's keys come in no particular order: relate one still queued.
	first := got.wait(t, 1)[0]
	var queued []string
	for _, name := range []string{"p0", "p1", "p2"} {
		if first != "ns/"+name+" value=1" {
			queued = append(queued, name)
		}
	}
	if _, err := secondaries.Create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s",
		Labels: map[string]string{"owner": queued[1]}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the related key moves up to the live keys", func() bool { live, sync := l.Queued(); return live == 1 && sync == 1 })
	release()
	want := []string{first, "ns/" + queued[1] + " value=1", "ns/" + queued[0] + " value=1"}
	if diff := cmp.Diff(want, got.wait(t, len(want))); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}
