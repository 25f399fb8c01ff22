package manager_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// sentinel is a key enqueued last: once it is reconciled, so is every key enqueued
// before it (a typed.Loop with one worker reconciles live keys in order).
const sentinel = "a/zz-sentinel"

// requestLog records what a reconciler was asked, in order: each key, marked "(gone)"
// when the object is not in the cache. A hook, when set, runs in each reconcile.
type requestLog struct {
	mu   sync.Mutex
	seen []string
	hook func(ctx context.Context, req typed.Request[cm])
	ch   chan string
}

func newRequestLog() *requestLog { return &requestLog{ch: make(chan string, 1000)} }

func (l *requestLog) reconcile(ctx context.Context, req typed.Request[cm]) (typed.Result, error) {
	s := req.Key
	if req.Deleted {
		s += " (gone)"
	}
	l.mu.Lock()
	l.seen = append(l.seen, s)
	hook := l.hook
	l.mu.Unlock()
	if hook != nil {
		hook(ctx, req)
	}
	l.ch <- s
	return typed.Result{}, nil
}

func (l *requestLog) sorted() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(slices.Values(l.seen))
}

// until waits for the reconcile of want.
func (l *requestLog) until(t *testing.T, want string) {
	t.Helper()
	for {
		if got := receive(t, l.ch, "the reconcile of "+want); got == want {
			return
		}
	}
}

// A key enqueued by hand is reconciled like a key with an event: from outside, from a
// reconciler through its context, before the Manager runs, for an object not in the cache,
// and by the Loop of its namespace.
func TestEnqueueReconcilesAKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		namespaces []string
		// before runs before the Manager; during once the initial keys are reconciled.
		before, during func(t *testing.T, l *manager.Loop[cm])
		hook           func(ctx context.Context, req typed.Request[cm])
		want           []string
	}{{
		name:   "a key enqueued from outside while the loop runs",
		during: func(t *testing.T, l *manager.Loop[cm]) { enqueue(t, l, "a/one") },
		want:   []string{"a/one", "a/one", "a/two", "b/three"},
	}, {
		name:   "a key of an object not in the cache, reconciled as gone",
		during: func(t *testing.T, l *manager.Loop[cm]) { enqueue(t, l, "a/ghost") },
		want:   []string{"a/ghost (gone)", "a/one", "a/two", "b/three"},
	}, {
		name: "a key enqueued by a reconciler, through its context",
		hook: func(ctx context.Context, req typed.Request[cm]) {
			if req.Key == "a/one" {
				// A key no event queues, so that nothing else explains its reconcile (a
				// key still queued would be reconciled once, enqueued or not).
				if err := manager.Enqueue(ctx, "a/asked-for"); err != nil {
					panic(err)
				}
			}
		},
		want: []string{"a/asked-for (gone)", "a/one", "a/two", "b/three"},
	}, {
		name:   "a key enqueued before the manager runs waits for the loop",
		before: func(t *testing.T, l *manager.Loop[cm]) { enqueue(t, l, "b/ghost") },
		want:   []string{"a/one", "a/two", "b/ghost (gone)", "b/three"},
	}, {
		name:       "a key of a cache of several namespaces, by its namespace's loop only",
		namespaces: []string{"a", "b"},
		during:     func(t *testing.T, l *manager.Loop[cm]) { enqueue(t, l, "b/three") },
		want:       []string{"a/one", "a/two", "b/three", "b/three"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := fake.New[cm, cmList](configMap("a", "one", nil), configMap("a", "two", nil), configMap("b", "three", nil))
			m := manager.New(manager.Options{})
			c := acquire(t, m, source(f), manager.CacheOptions[cm]{Namespaces: tc.namespaces})
			defer c.Release()
			log := newRequestLog()
			log.hook = tc.hook
			l, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](log.reconcile), typed.Options{Name: "configmaps", Workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				tc.before(t, l)
			}
			run(t, m)
			eventually(t, "the initial reconciles", func() bool { return len(log.sorted()) >= 3 })
			if tc.during != nil {
				tc.during(t, l)
			}
			// A sentinel per Loop: a cache of several namespaces has one per namespace.
			sentinels := map[string]bool{}
			for _, ns := range append([]string{"a"}, tc.namespaces...) {
				sentinels[ns+"/zz-sentinel (gone)"] = true
				enqueue(t, l, ns+"/zz-sentinel")
			}
			for len(sentinels) > 0 {
				delete(sentinels, receive(t, log.ch, "the sentinels' reconciles"))
			}
			got := slices.DeleteFunc(log.sorted(), func(s string) bool { return strings.Contains(s, "/zz-sentinel") })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("keys reconciled (-want +got):\n%s", diff)
			}
		})
	}
}

func enqueue(t *testing.T, l *manager.Loop[cm], key string) {
	t.Helper()
	if err := l.Enqueue(key); err != nil {
		t.Fatalf("Enqueue(%q): %v", key, err)
	}
}

// depthLog is a typed.Metrics that hands each queue depth to a channel.
type depthLog struct{ depths chan int }

func (d depthLog) QueueDepth(_ string, depth int) {
	select {
	case d.depths <- depth:
	default:
	}
}
func (depthLog) Retry(string)                           {}
func (depthLog) ReconcileLatency(string, time.Duration) {}
func (depthLog) ReconcileError(string, bool)            {}

// A key enqueued many times while it waits is reconciled once, as a key with many events
// is.
func TestAKeyEnqueuedManyTimesWhileWaitingIsReconciledOnce(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "busy", nil))
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(f))
	defer c.Release()
	log := newRequestLog()
	busy, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	log.hook = func(_ context.Context, req typed.Request[cm]) {
		if req.Key == "a/busy" {
			once.Do(func() { close(busy); <-release })
		}
	}
	metrics := depthLog{depths: make(chan int, 10000)}
	l, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](log.reconcile), typed.Options{Name: "configmaps", Workers: 1, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	receive(t, busy, "the one worker is busy")
	for range 100 {
		enqueue(t, l, "a/again")
	}
	enqueue(t, l, sentinel)
	// Enqueue queues at once: the queue holds a/again once, and the sentinel.
	for depth := 0; depth < 2; {
		depth = receive(t, metrics.depths, "the queue to hold a/again and the sentinel")
	}
	close(release)
	log.until(t, sentinel+" (gone)")
	want := []string{"a/again (gone)", "a/busy", sentinel + " (gone)"}
	if diff := cmp.Diff(want, log.sorted()); diff != "" {
		t.Errorf("keys reconciled (-want +got):\n%s", diff)
	}
}

// A Trigger runs while its Loop runs: a channel's keys are reconciled, an invalid one is
// skipped, and its closing ends the trigger alone; a trigger's error stops the Manager,
// which returns it.
func TestTriggers(t *testing.T) {
	t.Run("a channel", func(t *testing.T) {
		f := fake.New[cm, cmList](configMap("a", "one", nil))
		m := manager.New(manager.Options{})
		c := acquire(t, m, source(f))
		defer c.Release()
		log := newRequestLog()
		l, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](log.reconcile), typed.Options{Name: "configmaps", Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		keys := make(chan string)
		if err := l.AddTrigger("webhook", manager.Channel(keys)); err != nil {
			t.Fatal(err)
		}
		run(t, m)
		log.until(t, "a/one")
		for _, key := range []string{"a/one", "", "a/ghost", "a/"} {
			keys <- key // read while the loop runs
		}
		close(keys)
		enqueue(t, l, sentinel)
		log.until(t, sentinel+" (gone)")
		want := []string{"a/ghost (gone)", "a/one", "a/one", sentinel + " (gone)"}
		if diff := cmp.Diff(want, log.sorted()); diff != "" {
			t.Errorf("keys reconciled (-want +got):\n%s", diff)
		}
	})
	t.Run("an error", func(t *testing.T) {
		errSource := errors.New("the queue is gone")
		m := manager.New(manager.Options{})
		c := acquire(t, m, source(fake.New[cm, cmList]()))
		defer c.Release()
		l, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](newRequestLog().reconcile), typed.Options{Name: "configmaps"})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.AddTrigger("queue", func(ctx context.Context, enqueue func(string) error) error {
			if err := enqueue("a/one"); err != nil {
				return err
			}
			return errSource
		}); err != nil {
			t.Fatal(err)
		}
		err = m.Run(testContext(t))
		if !errors.Is(err, errSource) || !strings.Contains(err.Error(), `"trigger queue of loop configmaps"`) {
			t.Errorf("Run = %v, want the trigger's error, naming it", err)
		}
	})
}

func TestEnqueueAndTriggersRejectBadInput(t *testing.T) {
	f := fake.New[cm, cmList]()
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(f), manager.CacheOptions[cm]{Namespaces: []string{"a"}})
	defer c.Release()
	l, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](newRequestLog().reconcile), typed.Options{Name: "configmaps"})
	if err != nil {
		t.Fatal(err)
	}
	stopped := manager.New(manager.Options{})
	stoppedCache := acquire(t, stopped, source(f))
	stoppedLoop, err := manager.NewLoop(stoppedCache, typed.ReconcilerFunc[cm](newRequestLog().reconcile), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(testContext(t))
	cancel()
	if err := stopped.Run(ended); err != nil {
		t.Fatal(err)
	}
	var nilLoop *manager.Loop[cm]
	var nilContext context.Context
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"Enqueue of a key without a name", l.Enqueue("a/"), manager.ErrInvalidKey},
		{"Enqueue of an empty key", l.Enqueue(""), manager.ErrInvalidKey},
		{"Enqueue of a key outside the loop's namespaces", l.Enqueue("b/one"), manager.ErrInvalidKey},
		{"Enqueue of a cluster-scoped key into a namespaced loop", l.Enqueue("one"), manager.ErrInvalidKey},
		{"Enqueue into a nil loop", nilLoop.Enqueue("a/one"), controller.ErrNilArgument},
		{"Enqueue into a stopped manager's loop", stoppedLoop.Enqueue("a/one"), manager.ErrStopped},
		{"Enqueue from a context that is no reconcile's", manager.Enqueue(context.Background(), "a/one"), manager.ErrNotInReconcile},
		{"Enqueue from a nil context", manager.Enqueue(nilContext, "a/one"), controller.ErrNilArgument},
		{"AddTrigger of a nil trigger", l.AddTrigger("nil", nil), controller.ErrNilArgument},
		{"AddTrigger of a nil channel", l.AddTrigger("nil channel", manager.Channel(nil)), controller.ErrNilArgument},
		{"AddTrigger to a nil loop", nilLoop.AddTrigger("t", manager.Channel(make(chan string))), controller.ErrNilArgument},
		{"AddTrigger to a stopped manager's loop", stoppedLoop.AddTrigger("t", manager.Channel(make(chan string))), manager.ErrStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.want) {
				t.Errorf("got %v, want %v", tc.err, tc.want)
			}
		})
	}
	if err := l.Enqueue(fmt.Sprint("a/", "fine")); err != nil {
		t.Errorf("Enqueue of a good key before Run = %v", err)
	}
}
