package typed_test

// Tests that attack the Loop's guarantees (DESIGN 13-15): keys as the controller computed
// them, deletions with their last state and no state kept past their reconcile, one Run
// at a time, retries that never silently give up, and errors that are seen.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/typedinformer/typedinformer/typed/predicate"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
)

// runUntilCleanup runs c and l until the test ends, with ctx as their context, waits
// until c has synced and src has a watcher, and checks that nothing is left running.
func runUntilCleanup(ctx context.Context, t *testing.T, src *fake.ListerWatcher[obj, list], c *controller.Controller[obj, list], l *typed.Loop[obj]) {
	t.Helper()
	ctx = runUntilEnd(ctx, t, c.Run, l.Run)
	_ = c.WaitForSync(ctx)
	_ = src.WaitForWatchers(ctx, 1)
}

// eventually polls cond until it holds, failing t with what after testTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, what, cond, testTimeout)
}

func TestLoopReconcilesTheKeysTheControllerComputed(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{KeyFunc: func(o obj) (string, error) { return "cm:" + o.Name, nil }})
	got := newCalls()
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		got.add(fmt.Sprintf("%s (%s/%s)", describe(req), req.Namespace, req.Name))
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(context.Background(), t, src, c, l)
	got.wait(t, 1)
	if _, err := src.Delete("ns", "a"); err != nil {
		t.Fatal(err)
	}
	want := []string{"cm:a value=1 (ns/a)", "cm:a deleted, last value=1 (ns/a)"}
	if diff := cmp.Diff(want, got.wait(t, 2)); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}

func TestDeletionKeepsItsLastStateWhenTheKeyIsDeletedAgainDuringItsReconcile(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	got := newCalls()
	inFirstDeletion, release := make(chan struct{}), make(chan struct{})
	var deletions atomic.Int32
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		if req.Deleted && deletions.Add(1) == 1 {
			close(inFirstDeletion)
			<-release
		}
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(context.Background(), t, src, c, l)
	got.wait(t, 1)
	if _, err := src.Delete("ns", "a"); err != nil {
		t.Fatal(err)
	}
	receive(t, inFirstDeletion, "the first deletion's reconcile starts")
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release) // a failed test must not leave the reconcile blocked
		}
	})
	// Re-created and deleted again while that reconcile is in flight. The loop must see
	// the re-creation before the second deletion: an addition and a deletion pending
	// together for a key the handler does not know cancel out.
	if _, err := src.Create(cm("a", "2")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the loop sees the re-creation", func() bool {
		_, kept := l.LastKnown("ns/a")
		_, cached := c.Store().Get("ns/a")
		return cached && !kept
	})
	if _, err := src.Delete("ns", "a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the loop keeps the second deletion's last state", func() bool {
		last, ok := l.LastKnown("ns/a")
		return ok && last.Data["v"] == "2"
	})
	close(release)
	want := []string{"ns/a value=1", "ns/a deleted, last value=1", "ns/a deleted, last value=2"}
	if diff := cmp.Diff(want, got.wait(t, 3)); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
	eventually(t, "no last state is kept once both deletions are reconciled", func() bool { return l.Tombstones() == 0 })
}

func TestDeletionsLastStatesAreDroppedWhateverTheReconcilesOutcome(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		result     error
		maxRetries int
	}{
		{name: "success", result: nil},
		{name: "terminal error", result: typed.Terminal(boom)},
		{name: "retries exhausted", result: boom, maxRetries: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const keys = 20
			var objs []obj
			for i := range keys {
				objs = append(objs, cm(fmt.Sprint(i), "1"))
			}
			src := fake.New[obj, list](objs...)
			c := testctl.New(t, src, controller.Options[obj]{})
			var given atomic.Int32 // deletions whose reconcile ended for good
			live := newCalls()
			l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
				if !req.Deleted {
					live.add(req.Key)
					return typed.Result{}, nil
				}
				if req.LastKnown == nil {
					t.Errorf("%s reconciled as deleted without its last state", req.Key)
				}
				return typed.Result{}, tt.result
			}), typed.Options{RateLimiter: fastRetries, MaxRetries: tt.maxRetries, Workers: 2,
				OnError: func(_ context.Context, _ string, err error) {
					if typed.IsTerminal(err) || errors.Is(err, typed.ErrRetriesExhausted) {
						given.Add(1)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(context.Background(), t, src, c, l)
			// Deleted before the loop has seen it, an object is never reconciled at all:
			// its pending addition and deletion cancel out.
			live.wait(t, keys)
			for i := range keys {
				if _, err := src.Delete("ns", fmt.Sprint(i)); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "every deletion's last state is dropped", func() bool {
				return l.Tombstones() == 0 && l.ScheduledRetries() == 0 && c.Store().Len() == 0 &&
					(tt.result == nil || int(given.Load()) == keys)
			})
		})
	}
}

// A deletion's last state is kept while its key is still pending, retried after an error
// or requeued, and dropped once a reconcile of it asks for nothing more.
func TestDeletionsLastStateIsKeptWhileItsKeyIsPending(t *testing.T) {
	tests := []struct {
		name    string
		pending func() (typed.Result, error) // what each of the first 3 deletion reconciles returns
	}{
		{name: "retried after an error", pending: func() (typed.Result, error) {
			return typed.Result{}, errors.New("webhook unavailable")
		}},
		{name: "requeued after a while", pending: func() (typed.Result, error) {
			return typed.Result{RequeueAfter: time.Millisecond}, nil // cleanup still under way
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[obj, list](cm("a", "1"))
			c := testctl.New(t, src, controller.Options[obj]{})
			got := newCalls()
			var deletions atomic.Int32
			l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
				got.add(describe(req))
				if req.Deleted && deletions.Add(1) <= 3 {
					return tt.pending()
				}
				return typed.Result{}, nil
			}), typed.Options{RateLimiter: fastRetries, OnError: func(context.Context, string, error) {}})
			if err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(context.Background(), t, src, c, l)
			got.wait(t, 1)
			if _, err := src.Delete("ns", "a"); err != nil {
				t.Fatal(err)
			}
			want := []string{"ns/a value=1"}
			for range 4 {
				want = append(want, "ns/a deleted, last value=1")
			}
			if diff := cmp.Diff(want, got.wait(t, 5)); diff != "" {
				t.Errorf("reconciles (-want +got):\n%s", diff)
			}
			eventually(t, "the last state is dropped once the deletion is reconciled", func() bool { return l.Tombstones() == 0 })
		})
	}
}

func TestASecondRunWhileRunningIsAnErrorAndRunAfterReturnWorks(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	got := newCalls()
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, c.Run)

	for round := 1; round <= 3; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() { first <- l.Run(ctx) }()
		got.wait(t, round) // every known key is reconciled once per Run
		if err := l.Run(ctx); !errors.Is(err, controller.ErrAlreadyRunning) {
			t.Errorf("round %d: a second Run while running = %v, want ErrAlreadyRunning", round, err)
		}
		cancel()
		if err := receive(t, first, "the first Run returns"); err != nil {
			t.Errorf("round %d: Run = %v", round, err)
		}
	}
	if diff := cmp.Diff([]string{"ns/a value=1", "ns/a value=1", "ns/a value=1"}, got.wait(t, 3)); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}

func TestConcurrentRunsNeverReconcileAKeyTwiceAtOnce(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	var active, overlaps atomic.Int32
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		if active.Add(1) > 1 {
			overlaps.Add(1)
		}
		time.Sleep(time.Millisecond)
		active.Add(-1)
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(ctx) })
	var running, refused atomic.Int32
	for range 8 {
		wg.Go(func() {
			if err := l.Run(ctx); errors.Is(err, controller.ErrAlreadyRunning) {
				refused.Add(1)
			} else {
				running.Add(1)
			}
		})
	}
	eventually(t, "seven of eight concurrent Runs are refused", func() bool { return refused.Load() == 7 })
	for i := 2; i < 50; i++ {
		if _, err := src.Update(cm("a", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	verifyNoLeaks(t)
	if running.Load() != 1 || overlaps.Load() != 0 {
		t.Errorf("%d Runs ran and %d reconciles overlapped, want 1 and 0", running.Load(), overlaps.Load())
	}
}

// fixedDelay retries after the same delay every time, counting failures as the workqueue's
// limiters do.
type fixedDelay struct {
	d        time.Duration
	mu       sync.Mutex
	requeues map[string]int
}

func (f *fixedDelay) When(key string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requeues[key]++
	return f.d
}

func (f *fixedDelay) Forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.requeues, key)
}

func (f *fixedDelay) NumRequeues(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requeues[key]
}

func TestTerminalCancelsWhatAnEarlierReconcileScheduled(t *testing.T) {
	boom := errors.New("boom")
	start := time.Now()
	tests := []struct {
		name     string
		first    typed.Result
		firstErr error
		terminal bool // an event reconciles the key again, and that reconcile is terminal
		want     int  // reconciles of ns/a
	}{
		{name: "a scheduled retry runs when due", firstErr: boom, want: 2},
		{name: "a scheduled requeue runs when due", first: typed.Result{RequeueAfter: time.Second}, want: 2},
		{name: "a terminal error cancels a scheduled retry", firstErr: boom, terminal: true, want: 2},
		{name: "a terminal error cancels a scheduled requeue", first: typed.Result{RequeueAfter: time.Second}, terminal: true, want: 2},
		{name: "a requeue at a time runs when the clock reaches it", first: typed.Result{RequeueAt: start.Add(time.Second)}, want: 2},
		{name: "a requeue at a time and after a duration runs at the earlier", first: typed.Result{RequeueAt: start.Add(time.Hour), RequeueAfter: time.Second}, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[obj, list](cm("a", "1"))
			c := testctl.New(t, src, controller.Options[obj]{})
			clk := testingclock.NewFakeClock(start)
			var attempts atomic.Int32
			got := newCalls()
			l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
				defer got.add(req.Key)
				if req.Key != "ns/a" {
					return typed.Result{}, nil
				}
				switch attempts.Add(1) {
				case 1:
					return tt.first, tt.firstErr
				case 2:
					if tt.terminal {
						return typed.Result{}, typed.Terminal(boom)
					}
				}
				return typed.Result{}, nil
			}), typed.Options{Clock: clk, RateLimiter: &fixedDelay{d: time.Second, requeues: map[string]int{}},
				OnError: func(context.Context, string, error) {}})
			if err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(context.Background(), t, src, c, l)
			got.wait(t, 1)
			eventually(t, "the first reconcile scheduled a retry", func() bool { return l.ScheduledRetries() == 1 })
			n := 1
			if tt.terminal {
				if _, err := src.Update(cm("a", "2")); err != nil {
					t.Fatal(err)
				}
				n++
				got.wait(t, n)
			}
			clk.Step(2 * time.Second)
			if !tt.terminal {
				n++
				got.wait(t, n)
			}
			// A further reconcile of ns/a would show up before this one of an unrelated key.
			if _, err := src.Create(cm("z", "1")); err != nil {
				t.Fatal(err)
			}
			got.wait(t, n+1)
			if got := int(attempts.Load()); got != tt.want {
				t.Errorf("ns/a reconciled %d times, want %d", got, tt.want)
			}
			if got := l.ScheduledRetries(); got != 0 {
				t.Errorf("%d retries still scheduled, want none", got)
			}
		})
	}
}

// A reconcile that computes its next time from the Loop's clock and returns it as
// RequeueAt is reconciled again when the clock reaches it, even if the clock got there
// before the Loop scheduled the requeue: RequeueAfter would count from then and miss it.
func TestARequeueAtATimeTheClockHasPassedRunsAtOnce(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	clk := testingclock.NewFakeClock(time.Now())
	var attempts atomic.Int32
	got := newCalls()
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		defer got.add("reconcile")
		if attempts.Add(1) > 1 {
			return typed.Result{}, nil
		}
		next := clk.Now().Add(time.Minute)
		clk.Step(time.Minute) // the test's clock moves on while the reconcile returns
		return typed.Result{RequeueAt: next}, nil
	}), typed.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(context.Background(), t, src, c, l)
	got.wait(t, 2) // no further step of the clock
	if got := l.ScheduledRetries(); got != 0 {
		t.Errorf("%d retries still scheduled, want none", got)
	}
}

func TestDefaultOptionsNeverGiveUpOnAFailingKey(t *testing.T) {
	const failures = 25 // more than any cap the Loop ever had
	src := fake.New[obj, list](cm("a", "1"))
	var attempts atomic.Int32
	got := newCalls()
	var exhausted atomic.Bool
	harness(t, src, typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		defer got.add("attempt")
		if attempts.Add(1) <= failures {
			return typed.Result{}, errors.New("quota exceeded")
		}
		return typed.Result{}, nil
	}), typed.Options{RateLimiter: fastRetries, OnError: func(_ context.Context, _ string, err error) {
		if errors.Is(err, typed.ErrRetriesExhausted) {
			exhausted.Store(true)
		}
	}})
	got.wait(t, failures+1)
	if exhausted.Load() {
		t.Error("the loop gave up on a failing key with the default options")
	}
}

// logLines collects what a logr logger writes, one string per line.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() klog.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 0})
}

func (l *logLines) containing(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

func TestReconcileErrorsAreLoggedAtErrorLevelWithTheLoopAndKey(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	var logs logLines
	var attempts atomic.Int32
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		klog.FromContext(ctx).Info("reconciling")
		switch attempts.Add(1) {
		case 1:
			return typed.Result{}, errors.New("boom")
		case 2:
			panic("kaboom")
		}
		return typed.Result{}, nil
	}), typed.Options{Name: "mirror", RateLimiter: fastRetries})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(klog.NewContext(context.Background(), logs.logger()), t, src, c, l)
	eventually(t, "three reconciles", func() bool { return attempts.Load() >= 3 })
	if got := logs.containing(`"msg"="reconciling"`, `"loop"="mirror"`, `"key"="ns/a"`); len(got) < 3 {
		t.Errorf("reconciler's log lines with loop and key: %q, want one per reconcile", got)
	}
	if got := logs.containing(`"msg"="reconcile failed"`, `"error"="boom"`, `"loop"="mirror"`, `"key"="ns/a"`); len(got) != 1 {
		t.Errorf("error lines for the failed reconcile: %q, want one", got)
	}
	if got := logs.containing(`"msg"="reconcile panicked"`, `kaboom`, `"stack"=`, `"key"="ns/a"`); len(got) != 1 {
		t.Errorf("error lines for the panic: %q, want one with the stack", got)
	}
}

func TestRelatedCalledWhileTheLoopRunsTakesEffect(t *testing.T) {
	owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a-copy", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "a"},
	}}}
	primaries := fake.New[obj, list](cm("a", "1"))
	secondaries := fake.New[*corev1.Secret, *corev1.SecretList]()
	pc := testctl.New(t, primaries, controller.Options[obj]{})
	sc := testctl.New(t, secondaries, controller.Options[*corev1.Secret]{})
	got := newCalls()
	l, err := typed.NewLoop(pc, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		got.add(req.Key)
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runUntilEnd(context.Background(), t, pc.Run, sc.Run, l.Run)
	got.wait(t, 1)
	typed.Related(l, sc, typed.OwnerKeys[*corev1.Secret](schema.GroupKind{Kind: "ConfigMap"}, meta.RESTScopeNamespace))
	_ = secondaries.WaitForWatchers(ctx, 1)
	if _, err := secondaries.Create(owned); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ns/a", "ns/a"}, got.wait(t, 2)); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}

func TestOwnerKeysMapsByTheOwnersScope(t *testing.T) {
	ref := func(apiVersion, kind, name string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name}
	}
	tests := []struct {
		name  string
		obj   *corev1.Pod
		owner schema.GroupKind
		scope meta.RESTScope
		want  []string
	}{
		{
			name:  "a namespaced owner is in its dependent's namespace",
			obj:   &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", OwnerReferences: []metav1.OwnerReference{ref("apps/v1", "ReplicaSet", "web")}}},
			owner: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, scope: meta.RESTScopeNamespace,
			want: []string{"shop/web"},
		},
		{
			name:  "a cluster-scoped owner of a namespaced object is keyed by its name",
			obj:   &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-node1", OwnerReferences: []metav1.OwnerReference{ref("v1", "Node", "node1")}}},
			owner: schema.GroupKind{Kind: "Node"}, scope: meta.RESTScopeRoot,
			want: []string{"node1"},
		},
		{
			name:  "a cluster-scoped owner of a cluster-scoped object",
			obj:   &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", OwnerReferences: []metav1.OwnerReference{ref("v1", "Node", "node1")}}},
			owner: schema.GroupKind{Kind: "Node"}, scope: meta.RESTScopeRoot,
			want: []string{"node1"},
		},
		{
			name: "only owners of the group and kind",
			obj: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", OwnerReferences: []metav1.OwnerReference{
				ref("apps/v1", "ReplicaSet", "web"), ref("v1", "ConfigMap", "not-a-replicaset"), ref("example.com/v1", "ReplicaSet", "other-group"),
				ref("not/a/group/version", "ReplicaSet", "unparsable"),
			}}},
			owner: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, scope: meta.RESTScopeNamespace,
			want: []string{"shop/web"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := typed.OwnerKeys[*corev1.Pod](tt.owner, tt.scope)(tt.obj)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("owner keys (-want +got):\n%s", diff)
			}
		})
	}
}

// The workqueue's limiter interface is what Options.RateLimiter takes.
var _ workqueue.TypedRateLimiter[string] = (*fixedDelay)(nil)

// panickyMetrics panics in every method.
type panickyMetrics struct{}

func (panickyMetrics) QueueDepth(string, int)                 { panic("QueueDepth boom") }
func (panickyMetrics) Retry(string)                           { panic("Retry boom") }
func (panickyMetrics) ReconcileLatency(string, time.Duration) { panic("ReconcileLatency boom") }
func (panickyMetrics) ReconcileError(string, bool)            { panic("ReconcileError boom") }

// It is WorkMetrics too, panicking in those methods as well.
func (panickyMetrics) Workers(string, int)                          { panic("Workers boom") }
func (panickyMetrics) KeysQueued(string, int)                       { panic("KeysQueued boom") }
func (panickyMetrics) WorkStarted(string, time.Duration, time.Time) { panic("WorkStarted boom") }
func (panickyMetrics) WorkDone(string, time.Time)                   { panic("WorkDone boom") }
func (panickyMetrics) Reconciled(string, typed.Outcome)             { panic("Reconciled boom") }

func TestPanickingCallbacksDoNotStopTheLoop(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	var attempts atomic.Int32
	var logs logLines
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		if attempts.Add(1) < 3 {
			return typed.Result{}, errors.New("boom")
		}
		return typed.Result{}, nil
	}), typed.Options{RateLimiter: fastRetries, Metrics: panickyMetrics{},
		OnError: func(context.Context, string, error) { panic("OnError boom") }})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(klog.NewContext(context.Background(), logs.logger()), t, src, c, l)
	eventually(t, "the key is retried until it succeeds", func() bool { return attempts.Load() >= 3 })
	if got := logs.containing(`"error"="boom"`, `OnError boom`); len(got) != 2 {
		t.Errorf("log lines for the errors whose OnError panicked: %q, want 2", got)
	}
}

func TestNilArgumentsAreErrorsNotPanics(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	ok := typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) { return typed.Result{}, nil })
	// NewLoop refuses its own arguments, and makes no Loop.
	for _, tt := range []struct {
		name    string
		newLoop func() (*typed.Loop[obj], error)
	}{
		{"a nil source", func() (*typed.Loop[obj], error) { return typed.NewLoop[obj](nil, ok, typed.Options{}) }},
		{"a typed-nil controller", func() (*typed.Loop[obj], error) {
			return typed.NewLoop((*controller.Controller[obj, list])(nil), ok, typed.Options{})
		}},
		{"a nil reconciler", func() (*typed.Loop[obj], error) { return typed.NewLoop(c, nil, typed.Options{}) }},
		{"a nil ReconcilerFunc", func() (*typed.Loop[obj], error) {
			return typed.NewLoop(c, typed.ReconcilerFunc[obj](nil), typed.Options{})
		}},
		{"a nil predicate", func() (*typed.Loop[obj], error) {
			return typed.NewLoop(c, ok, typed.Options{}, predicate.LabelsChanged, nil)
		}},
		{"a combinator of a nil predicate", func() (*typed.Loop[obj], error) {
			return typed.NewLoop(c, ok, typed.Options{}, predicate.Not[obj](nil))
		}},
	} {
		t.Run("NewLoop with "+tt.name, func(t *testing.T) {
			if l, err := tt.newLoop(); !errors.Is(err, controller.ErrNilArgument) || l != nil {
				t.Errorf("NewLoop = %v, %v; want no Loop and an error wrapping controller.ErrNilArgument", l, err)
			}
			verifyNoLeaks(t)
		})
	}

	// Run refuses a Loop NewLoop did not make, and the mistakes of Related.
	related := func(sc *controller.Controller[obj, list], keysOf func(obj) []string, preds ...predicate.Predicate[obj]) *typed.Loop[obj] {
		l, err := typed.NewLoop(c, ok, typed.Options{})
		if err != nil {
			t.Fatal(err)
		}
		typed.Related(l, sc, keysOf, preds...)
		return l
	}
	var nilLoop *typed.Loop[obj]
	all := func(string, obj) bool { return true }
	tests := []struct {
		name string
		run  func(ctx context.Context) error
		want error
	}{
		{"a nil Loop", nilLoop.Run, controller.ErrNilArgument},
		{"a Loop not made by NewLoop", new(typed.Loop[obj]).Run, controller.ErrNilArgument},
		{"RunHandingOver of a nil Loop", func(ctx context.Context) error { return nilLoop.RunHandingOver(ctx, ctx) }, controller.ErrNilArgument},
		{"RunHandingOver of a Loop not made by NewLoop", func(ctx context.Context) error {
			return new(typed.Loop[obj]).RunHandingOver(ctx, ctx)
		}, controller.ErrNilArgument},
		{"HandOver of a nil Loop", func(ctx context.Context) error { return nilLoop.HandOver(ctx, ctx, all) }, controller.ErrNilArgument},
		{"HandOver of a Loop not made by NewLoop", func(ctx context.Context) error {
			return new(typed.Loop[obj]).HandOver(ctx, ctx, all)
		}, controller.ErrNilArgument},
		{"a Loop related to a nil controller", related(nil, func(obj) []string { return nil }).Run, controller.ErrNilArgument},
		{"a Loop related through a nil mapping", related(c, nil).Run, controller.ErrNilArgument},
		{"a Loop related with a nil predicate", related(c, func(obj) []string { return nil }, predicate.Or[obj](predicate.LabelsChanged, nil)).Run, controller.ErrNilArgument},
		{"RunAll with a nil function", func(ctx context.Context) error { return typed.RunAll(ctx, nil) }, controller.ErrNilArgument},
		{"a nil handler", func(context.Context) error { _, err := c.AddHandler("nil", nil); return err }, controller.ErrNilHandler},
		{"a nil HandlerFunc", func(context.Context) error {
			_, err := c.AddHandler("nil func", controller.HandlerFunc[obj](nil))
			return err
		}, controller.ErrNilHandler},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			if err := tt.run(ctx); !errors.Is(err, tt.want) {
				t.Errorf("= %v, want %v", err, tt.want)
			}
			verifyNoLeaks(t)
		})
	}
}

func TestRelatedMappingToAKeyThatNamesNothingIsReportedNotReconciled(t *testing.T) {
	primaries := fake.New[obj, list](cm("a", "1"))
	secondaries := fake.New[*corev1.Secret, *corev1.SecretList]()
	pc := testctl.New(t, primaries, controller.Options[obj]{})
	sc := testctl.New(t, secondaries, controller.Options[*corev1.Secret]{})
	got := newCalls()
	errs := make(chan error, 10)
	l, err := typed.NewLoop(pc, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{OnError: func(_ context.Context, _ string, err error) { errs <- err }})
	if err != nil {
		t.Fatal(err)
	}
	typed.Related(l, sc, func(s *corev1.Secret) []string {
		if s.Name == "panics" {
			panic("mapping boom")
		}
		return []string{"", "ns/", "ns/a"}
	})
	ctx := runUntilEnd(context.Background(), t, pc.Run, sc.Run, l.Run)
	got.wait(t, 1)
	_ = secondaries.WaitForWatchers(ctx, 1)
	for _, name := range []string{"panics", "s"} {
		if _, err := secondaries.Create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"ns/a value=1", "ns/a value=1"}, got.wait(t, 2)); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
	var reported []string
	for range 3 {
		reported = append(reported, receive(t, errs, "the bad mappings are reported").Error())
	}
	want := []string{
		"related mapping panicked on ns/panics: mapping boom",
		`related mapping gave "", which names no object, for ns/s`,
		`related mapping gave "ns/", which names no object, for ns/s`,
	}
	if diff := cmp.Diff(want, reported); diff != "" {
		t.Errorf("reported (-want +got):\n%s", diff)
	}
}

func TestRunsEndForgetsTheFailuresItCountedInAGivenRateLimiter(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	limiter := &fixedDelay{d: time.Hour, requeues: map[string]int{}} // a retry never comes due
	failed := make(chan struct{}, 10)
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		defer func() { failed <- struct{}{} }()
		return typed.Result{}, errors.New("boom")
	}), typed.Options{RateLimiter: limiter, OnError: func(context.Context, string, error) {}})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, c.Run)
	for term := 1; term <= 3; term++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		receive(t, failed, "the key fails")
		eventually(t, "the retry is scheduled", func() bool { return l.ScheduledRetries() == 1 })
		cancel()
		receive(t, done, "Run returns")
		if n := limiter.NumRequeues("ns/a"); n != 0 {
			t.Errorf("after Run %d the limiter still counts %d failures of ns/a, want 0", term, n)
		}
	}
}

func TestNewRefusesFromDynamicOverANilClient(t *testing.T) {
	if _, err := controller.New(client.FromDynamic[*corev1.ConfigMap](nil), controller.Options[*corev1.ConfigMap]{}); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("New = %v, want ErrNilArgument", err)
	}
}

// k8s.io/utils' FakeClock runs a timer's function while it holds its own lock, and the
// Loop stops a key's scheduled requeue while it holds its own, when the key is queued
// again. The clock stepping onto the requeue while an event queues the key must neither
// deadlock the Loop nor lose a reconcile.
func TestAFakeClockFiringARequeueThatAnEventCancelsDoesNotDeadlock(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	clk := testingclock.NewFakeClock(time.Now())
	// The clock's first timer due at the requeue's time holds the clock's lock until
	// released, so that the event below stops the requeue's timer while the clock fires.
	release := make(chan struct{})
	clk.AfterFunc(time.Second, func() { <-release })
	var reconciles atomic.Int64
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		if reconciles.Add(1) == 1 {
			return typed.Result{RequeueAfter: time.Second}, nil
		}
		return typed.Result{}, nil
	}), typed.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(context.Background(), t, src, c, l)
	eventually(t, "the requeue is scheduled", func() bool { return l.ScheduledRetries() == 1 })
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		clk.Step(time.Second) // fires the blocking timer, then the requeue's
	}()
	time.Sleep(100 * time.Millisecond)                  // let the step reach the blocking timer
	if _, err := src.Update(cm("a", "2")); err != nil { // queues the key: the Loop stops its requeue
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the Loop reach the timer's Stop, blocked on the clock
	close(release)
	select {
	case <-stepped:
	case <-time.After(testTimeout):
		t.Fatal("the clock's step never ended: the Loop and the clock deadlocked")
	}
	eventually(t, "the key reconciled again", func() bool { return reconciles.Load() >= 2 })
}
