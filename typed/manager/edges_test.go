package manager_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/typedinformer/typedinformer/typed/predicate"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// pausedListener is a probe listener whose Addr, which Run calls while it starts serving
// the probes, tells the test it was called and waits for it: the test then acts in the
// middle of Run's start.
type pausedListener struct {
	net.Listener
	once    sync.Once
	called  chan struct{}
	proceed chan struct{}
}

func (l *pausedListener) Addr() net.Addr {
	l.once.Do(func() {
		close(l.called)
		<-l.proceed
	})
	return l.Listener.Addr()
}

// A cache acquired, and a runnable added, while Run starts (it serves the probes before
// it starts what was registered) is started once: the cache has one watch, which its
// Release stops, and the runnable runs once (DESIGN 16: one watch per scope, stopped
// when its last user leaves).
func TestWhatIsAcquiredOrAddedWhileRunStartsIsStartedOnce(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &pausedListener{Listener: inner, called: make(chan struct{}), proceed: make(chan struct{})}
	f := fake.New[cm, cmList](configMap("a", "one", nil))
	m := manager.New(manager.Options{HealthProbeListener: l})
	r := start(t, m)
	receive(t, l.called, "Run serves the probes")

	c := acquire(t, m, source(f))
	var runs atomic.Int32
	if err := m.Add("every replica", manager.EveryReplica(manager.RunnableFunc(func(ctx context.Context) error {
		runs.Add(1)
		<-ctx.Done()
		return nil
	}))); err != nil {
		t.Fatal(err)
	}
	close(l.proceed)
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cache's watch", func() bool { return f.Watching() == 1 })
	<-c.Release()
	// A second start of the cache would keep a watch open, or open it again, after its
	// goroutines were reported gone.
	for range 20 {
		if n := f.Watching(); n != 0 {
			t.Fatalf("%d watches open after the cache's last handle was released, want 0", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	again := acquire(t, m, source(f))
	defer again.Release()
	eventually(t, "the new cache's watch", func() bool { return f.Watching() >= 1 })
	if err := r.stop(t); err != nil {
		t.Errorf("Run = %v", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the runnable added while Run started ran %d times, want 1", n)
	}
}

// A typed-nil probe listener is no listener: Run serves no probes and does not panic.
func TestATypedNilHealthProbeListenerIsNone(t *testing.T) {
	var l *net.TCPListener
	m := manager.New(manager.Options{HealthProbeListener: l})
	r := run(t, m)
	if err := r.stop(t); err != nil {
		t.Errorf("Run = %v", err)
	}
}

// panicsWhileNotServed answers its first list (a List, or the watch-list a cache starts
// with by default) 404 Not Found, as for a custom resource not installed, panics on the
// next (the check of whether it is served again), and serves from then on.
type panicsWhileNotServed struct {
	*cmFake
	lists atomic.Int32
}

func (p *panicsWhileNotServed) listed() error {
	switch p.lists.Add(1) {
	case 1:
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "")
	case 2:
		panic("the ListerWatcher panicked")
	}
	return nil
}

func (p *panicsWhileNotServed) List(ctx context.Context, opts metav1.ListOptions) (cmList, error) {
	if err := p.listed(); err != nil {
		return nil, err
	}
	return p.cmFake.List(ctx, opts)
}

func (p *panicsWhileNotServed) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		if err := p.listed(); err != nil {
			return nil, err
		}
	}
	return p.cmFake.Watch(ctx, opts)
}

// A ListerWatcher that panics while its cache waits for its resource to be served does not
// end the process: the cache lists again, and syncs once the ListerWatcher works.
func TestAListerWatcherPanickingWhileItsResourceIsNotServedIsRecovered(t *testing.T) {
	lw := &panicsWhileNotServed{cmFake: fake.New[cm, cmList](configMap("a", "one", nil))}
	m := manager.New(manager.Options{ResourceBackoff: wait.Backoff{Duration: 10 * time.Millisecond, Factor: 1, Steps: 1000}})
	src := manager.Namespaced[cm](func(string) *panicsWhileNotServed { return lw })
	c := acquire(t, m, src)
	defer c.Release()
	run(t, m)
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("a/one"); !ok || lw.lists.Load() < 3 {
		t.Errorf("a/one cached: %t after %d lists; want it cached after at least 3", ok, lw.lists.Load())
	}
}

// A key of the wrong scope names no object the Loop reconciles: enqueued, it is
// ErrInvalidKey; mapped by a Related cache, it is reported and dropped. Either way the
// reconciler never sees it, in particular never as the deletion of a live object of the
// same name (DESIGN 18).
func TestAKeyOfTheWrongScopeIsInvalidNeverADeletion(t *testing.T) {
	type node = *corev1.Node
	nodes := fake.New[node, *corev1.NodeList](&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	configMaps := fake.New[cm, cmList](configMap("default", "n1", nil))
	m := manager.New(manager.Options{})
	nodeCache, err := manager.Acquire(m, manager.ClusterScoped[node](nodes))
	if err != nil {
		t.Fatal(err)
	}
	defer nodeCache.Release()
	cmCache := acquire(t, m, source(configMaps))
	defer cmCache.Release()

	var mu sync.Mutex
	var seen []string
	var reported []error
	record := func(key string, deleted bool) {
		mu.Lock()
		defer mu.Unlock()
		if deleted {
			key += " (gone)"
		}
		seen = append(seen, key)
	}
	onError := func(_ context.Context, _ string, err error) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, err)
	}
	nodeLoop, err := manager.NewLoop(nodeCache, typed.ReconcilerFunc[node](func(_ context.Context, req typed.Request[node]) (typed.Result, error) {
		record("node "+req.Key, req.Deleted)
		return typed.Result{}, nil
	}), typed.Options{Name: "nodes", OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	cmLoop, err := manager.NewLoop(cmCache, typed.ReconcilerFunc[cm](func(_ context.Context, req typed.Request[cm]) (typed.Result, error) {
		record("configmap "+req.Key, req.Deleted)
		return typed.Result{}, nil
	}), typed.Options{Name: "configmaps", OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	// Each kind maps the other's object to the key its own object would have.
	if err := manager.Related(nodeLoop, cmCache, func(c cm) []string { return []string{c.Namespace + "/" + c.Name} }); err != nil {
		t.Fatal(err)
	}
	if err := manager.Related(cmLoop, nodeCache, func(n node) []string { return []string{n.Name} }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		enqueue func(string) error
		key     string
	}{{nodeLoop.Enqueue, "default/n1"}, {cmLoop.Enqueue, "n1"}} {
		if err := tc.enqueue(tc.key); !errors.Is(err, manager.ErrInvalidKey) {
			t.Errorf("Enqueue(%q) = %v, want ErrInvalidKey", tc.key, err)
		}
	}
	run(t, m)
	eventually(t, "both live objects reconciled, and both wrong keys reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 2 && len(reported) >= 2
	})
	// The valid keys enqueued last are reconciled after anything the wrong ones would
	// have queued.
	if err := nodeLoop.Enqueue("n1"); err != nil {
		t.Fatal(err)
	}
	if err := cmLoop.Enqueue("default/n1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the keys enqueued last", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 4
	})
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if strings.HasSuffix(s, "(gone)") {
			t.Errorf("reconciled %s: a key of the wrong scope reconciled a live object as deleted", s)
		}
	}
	for _, err := range reported {
		if !errors.Is(err, manager.ErrInvalidKey) {
			t.Errorf("reported %v, want ErrInvalidKey", err)
		}
	}
}

// Enqueue while the Manager shuts down is ErrStopped: no term starts again, so the key
// would never be reconciled, and a key is never silently dropped (DESIGN 18).
func TestEnqueueWhileTheManagerShutsDownIsErrStopped(t *testing.T) {
	configMaps := fake.New[cm, cmList](configMap("a", "one", nil))
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(configMaps))
	defer c.Release()
	enqueued := make(chan error, 1)
	var loop *manager.Loop[cm]
	loop, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](func(ctx context.Context, req typed.Request[cm]) (typed.Result, error) {
		<-ctx.Done() // in flight until the shutdown
		enqueued <- loop.Enqueue("a/two")
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, m)
	eventually(t, "a reconcile in flight", func() bool { return c.HasSynced() })
	time.Sleep(10 * time.Millisecond)
	if err := r.stop(t); err != nil {
		t.Errorf("Run = %v", err)
	}
	if err := receive(t, enqueued, "the reconcile's Enqueue"); !errors.Is(err, manager.ErrStopped) {
		t.Errorf("Enqueue during the shutdown = %v, want ErrStopped", err)
	}
}

// WaitForSync returns when its handle is released (ErrReleased) or the Manager stops
// (ErrStopped), not when its context ends: a cache that stopped never syncs.
func TestWaitForSyncReturnsWhenItsHandleIsReleasedOrTheManagerStops(t *testing.T) {
	never := gatedSecrets{ListerWatcher: fake.New[secret, secretList](), open: make(chan struct{})} // lists never answered
	m := manager.New(manager.Options{})
	src := manager.Namespaced[secret](func(string) gatedSecrets { return never })
	released, err := manager.Acquire(m, src)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := manager.Acquire(m, src, manager.CacheOptions[secret]{Namespaces: []string{"kept"}})
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Release()
	r := run(t, m)
	waits := map[string]chan error{"released": make(chan error, 1), "kept": make(chan error, 1)}
	go func() { waits["released"] <- released.WaitForSync(context.Background()) }()
	go func() { waits["kept"] <- kept.WaitForSync(context.Background()) }()
	time.Sleep(10 * time.Millisecond)
	released.Release()
	if err := receive(t, waits["released"], "WaitForSync on the released handle"); !errors.Is(err, manager.ErrReleased) {
		t.Errorf("WaitForSync on a handle released meanwhile = %v, want ErrReleased", err)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run = %v", err)
	}
	if err := receive(t, waits["kept"], "WaitForSync once the Manager stopped"); !errors.Is(err, manager.ErrStopped) {
		t.Errorf("WaitForSync once the Manager stopped = %v, want ErrStopped", err)
	}
}

// Owns refuses a cluster-scoped kind under a namespaced owner whether it is given as a
// Source or as a Cache: the owned objects could never name a namespaced controller.
func TestOwnsRefusesAClusterScopedCacheUnderANamespacedOwner(t *testing.T) {
	m := manager.New(manager.Options{})
	nodes, err := manager.Acquire(m, manager.ClusterScoped[*corev1.Node](fake.New[*corev1.Node, *corev1.NodeList]()))
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Release()
	b := manager.For(m, source(fake.New[cm, cmList]()))
	manager.Owns(b, nodes)
	l, err := b.Complete(typed.ReconcilerFunc[cm](newReconciles().reconcile))
	if !errors.Is(err, manager.ErrScope) || l != nil {
		t.Errorf("Complete = %v, %v; want ErrScope and no Loop", l, err)
	}
}

// A reconciler that changes a cached object in place, under a Manager with the mutation
// detector on, makes Run return the mutation, wrapped with its cache's name, and
// Options.OnMutation see it as it is found: a test fails without reading logs.
func TestAMutationOfACachedObjectReachesRunsErrorAndOnMutation(t *testing.T) {
	configMaps := fake.New[cm, cmList](configMap("a", "one", nil))
	found := make(chan string, 10)
	m := manager.New(manager.Options{DetectMutations: true, OnMutation: func(cache string, err *eventcache.MutationError) {
		found <- cache + " " + err.Key
	}})
	c := acquire(t, m, source(configMaps))
	defer c.Release()
	reconciled := make(chan struct{}, 10)
	if _, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](func(_ context.Context, req typed.Request[cm]) (typed.Result, error) {
		if req.Object != nil {
			req.Object.Data = map[string]string{"changed": "in place"} // the bug the detector is for
		}
		reconciled <- struct{}{}
		return typed.Result{}, nil
	}), typed.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	// The update follows the change, which the race detector would otherwise report: a
	// change in place races with every reader of the cache.
	receive(t, reconciled, "the reconcile")
	if _, err := configMaps.Update(configMap("a", "one", map[string]string{"v": "2"})); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, found, "OnMutation"); got != "*v1.ConfigMap a/one" {
		t.Errorf("OnMutation got %q, want the cache and the key", got)
	}
	cancel()
	err := receive(t, done, "Run returns")
	var mutation *eventcache.MutationError
	if !errors.As(err, &mutation) || mutation.Key != "a/one" || !strings.Contains(err.Error(), "cache *v1.ConfigMap") {
		t.Errorf("Run = %v, want the mutation of a/one, wrapped with its cache's name", err)
	}
}

// A Trigger that returns Enqueue's error stops with the Manager: a key refused because the
// Manager shuts down makes no failure of a clean stop.
func TestATriggerReturningEnqueuesShutdownErrorStopsCleanly(t *testing.T) {
	for i := range 5 {
		configMaps := fake.New[cm, cmList](configMap("a", "one", nil))
		m := manager.New(manager.Options{})
		c := acquire(t, m, source(configMaps))
		loop, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](newReconciles().reconcile), typed.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		if err := loop.AddTrigger("webhook", func(ctx context.Context, enqueue func(string) error) error {
			for {
				if err := enqueue("a/one"); err != nil { // a key always ready, as a busy webhook's
					return err
				}
				time.Sleep(time.Millisecond)
			}
		}); err != nil {
			t.Fatal(err)
		}
		r := run(t, m)
		if err := r.stop(t); err != nil {
			t.Fatalf("stop %d: Run = %v, want nil", i, err)
		}
	}
}

// A Source of a cluster-scoped kind that does not say so (ClusterScoped unset) still
// takes the key of an object its cache holds; a key without a namespace that names
// nothing cached is refused, never reconciled as a deletion.
func TestAnUndeclaredClusterScopedSourceTakesTheKeysOfItsObjects(t *testing.T) {
	type node = *corev1.Node
	nodes := fake.New[node, *corev1.NodeList](&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	m := manager.New(manager.Options{})
	c, err := manager.Acquire(m, manager.Namespaced[node](func(string) *fake.ListerWatcher[node, *corev1.NodeList] { return nodes }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	seen := make(chan string, 10)
	loop, err := manager.NewLoop(c, typed.ReconcilerFunc[node](func(_ context.Context, req typed.Request[node]) (typed.Result, error) {
		s := req.Key
		if req.Deleted {
			s += " (gone)"
		}
		seen <- s
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	if got := receive(t, seen, "the initial reconcile"); got != "n1" {
		t.Fatalf("reconciled %q, want n1", got)
	}
	if err := loop.Enqueue("gone"); !errors.Is(err, manager.ErrInvalidKey) {
		t.Errorf(`Enqueue("gone") = %v, want ErrInvalidKey`, err)
	}
	if err := loop.Enqueue("n1"); err != nil {
		t.Fatalf(`Enqueue("n1") = %v, want nil`, err)
	}
	if got := receive(t, seen, "the enqueued key"); got != "n1" {
		t.Errorf("reconciled %q, want n1", got)
	}
}

// WaitForSync on a cache that has synced returns nil, even once the Manager has stopped
// it: HasSynced is true.
func TestWaitForSyncOfASyncedCacheIsNilOnceTheManagerStopped(t *testing.T) {
	namespaces := make([]string, 40)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("ns-%d", i)
	}
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(fake.New[cm, cmList]()), manager.CacheOptions[cm]{Namespaces: namespaces})
	defer c.Release()
	r := run(t, m)
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	for i := range 100 {
		if err := c.WaitForSync(context.Background()); err != nil {
			t.Fatalf("WaitForSync %d after the stop = %v, want nil (HasSynced: %t)", i, err, c.HasSynced())
		}
	}
}

// Related refuses a bad predicate, a combinator of a nil one included, and then holds no
// handle on the related cache: releasing the caller's stops its watch. The Loop's Run
// refuses it too (typed.Related's rule), so that an unchecked error still stops the
// Manager.
func TestRelatedWithABadPredicateHoldsNoHandle(t *testing.T) {
	secrets := fake.New[secret, secretList]()
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(fake.New[cm, cmList]()))
	defer c.Release()
	related, err := manager.Acquire(m, sourceOf(secrets))
	if err != nil {
		t.Fatal(err)
	}
	loop, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](newReconciles().reconcile), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := manager.Related(loop, related, func(secret) []string { return nil }, predicate.Not[secret](nil)); !errors.Is(err, controller.ErrNilArgument) {
		t.Fatalf("Related = %v, want ErrNilArgument", err)
	}
	<-related.Release()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	if err := m.Run(ctx); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Run = %v, want the Loop's ErrNilArgument", err)
	}
	if n := secrets.Watching(); n != 0 {
		t.Errorf("%d watches of the related kind, want none: Related kept a handle", n)
	}
}
