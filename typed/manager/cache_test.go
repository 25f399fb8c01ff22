package manager_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/manager"
)

func byLabel(key string) eventcache.Indexers[cm] {
	return eventcache.Indexers[cm]{"by-" + key: func(obj cm) ([]string, error) { return []string{obj.Labels[key]}, nil }}
}

func identity(obj cm) (cm, error) { return obj, nil }

func byName(obj cm) ([]string, error) { return []string{obj.Name}, nil }

// Two Acquire calls share one list+watch exactly when their object type, namespace,
// selectors and transform are the same; a scope of several namespaces is one watch per
// namespace, each shared.
func TestAcquireSharesOneWatchPerTypeScopeSelectorsAndTransform(t *testing.T) {
	for _, tc := range []struct {
		name        string
		first, then manager.CacheOptions[cm]
		watches     int
	}{{
		name:    "the same namespace",
		first:   manager.CacheOptions[cm]{Namespaces: []string{"a"}},
		then:    manager.CacheOptions[cm]{Namespaces: []string{"a"}},
		watches: 1,
	}, {
		name:    "all namespaces, twice",
		watches: 1,
	}, {
		name:    "all namespaces and one namespace",
		then:    manager.CacheOptions[cm]{Namespaces: []string{"a"}},
		watches: 2,
	}, {
		name:    "sets of namespaces in another order, with a duplicate",
		first:   manager.CacheOptions[cm]{Namespaces: []string{"a", "b"}},
		then:    manager.CacheOptions[cm]{Namespaces: []string{"b", "a", "b"}},
		watches: 2,
	}, {
		name:    "a set shares each namespace with a cache of that namespace",
		first:   manager.CacheOptions[cm]{Namespaces: []string{"a", "b"}},
		then:    manager.CacheOptions[cm]{Namespaces: []string{"b"}},
		watches: 2,
	}, {
		name:    "equal label selectors written differently",
		first:   manager.CacheOptions[cm]{LabelSelector: labels.SelectorFromSet(labels.Set{"x": "1", "y": "2"})},
		then:    manager.CacheOptions[cm]{LabelSelector: must(labels.Parse("y=2,x=1"))},
		watches: 1,
	}, {
		name:    "different label selectors",
		first:   manager.CacheOptions[cm]{LabelSelector: labels.SelectorFromSet(labels.Set{"x": "1"})},
		then:    manager.CacheOptions[cm]{LabelSelector: labels.SelectorFromSet(labels.Set{"x": "2"})},
		watches: 2,
	}, {
		name:    "a field selector and none",
		first:   manager.CacheOptions[cm]{FieldSelector: fields.OneTermEqualSelector("metadata.name", "one")},
		watches: 2,
	}, {
		name:    "transforms of the same name",
		first:   manager.CacheOptions[cm]{Transform: client.StripManagedFields[cm], TransformName: "strip"},
		then:    manager.CacheOptions[cm]{Transform: client.StripManagedFields[cm], TransformName: "strip"},
		watches: 1,
	}, {
		name:    "transforms of different names",
		first:   manager.CacheOptions[cm]{Transform: client.StripManagedFields[cm], TransformName: "strip"},
		then:    manager.CacheOptions[cm]{Transform: identity, TransformName: "identity"},
		watches: 2,
	}, {
		name:    "unnamed transforms, even the same function, are never shared",
		first:   manager.CacheOptions[cm]{Transform: identity},
		then:    manager.CacheOptions[cm]{Transform: identity},
		watches: 2,
	}, {
		name:    "a transform and none",
		first:   manager.CacheOptions[cm]{Transform: identity, TransformName: "identity"},
		watches: 2,
	}, {
		name:    "fewer indexes than the shared cache has",
		first:   manager.CacheOptions[cm]{Indexers: byLabel("x")},
		watches: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := fake.New[cm, cmList](configMap("a", "one", nil), configMap("b", "two", nil))
			m := manager.New(manager.Options{})
			run(t, m)
			first := acquire(t, m, source(f), tc.first)
			then := acquire(t, m, source(f), tc.then)
			for _, c := range []*manager.Cache[cm]{first, then} {
				if err := c.WaitForSync(testContext(t)); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.WaitForWatchers(testContext(t), tc.watches); err != nil {
				t.Fatal(err)
			}
			got := map[string]int{"lists": lists(f), "watches": f.Watching()}
			want := map[string]int{"lists": tc.watches, "watches": tc.watches}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("requests to the server (-want +got):\n%s", diff)
			}
			<-first.Release()
			<-then.Release()
			if n := f.Watching(); n != 0 {
				t.Errorf("%d watches open once every handle is released, want 0", n)
			}
		})
	}
}

func must[V any](v V, err error) V {
	if err != nil {
		panic(err)
	}
	return v
}

func TestLastReleaseStopsTheCacheAndLeavesNoGoroutine(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil))
	m := manager.New(manager.Options{})
	run(t, m)
	managerOnly := goleak.IgnoreCurrent()

	first := acquire(t, m, source(f))
	second := acquire(t, m, source(f))
	if err := second.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	// Synced means listed: the watch that follows the list may not be open yet.
	if err := f.WaitForWatchers(testContext(t), 1); err != nil {
		t.Fatal(err)
	}
	if released := first.Release(); !closed(released) {
		t.Error("releasing a handle that is not the last stopped something to wait for")
	}
	if _, ok := second.Get("a/one"); !ok || f.Watching() != 1 {
		t.Errorf("after the first release: a/one cached %v and %d watches, want true and 1: the cache still has a user", ok, f.Watching())
	}
	receive(t, second.Release(), "the cache stops once its last handle is released")
	if n := f.Watching(); n != 0 {
		t.Errorf("%d watches open after the last release, want 0", n)
	}
	goleak.VerifyNone(t, managerOnly)
}

func TestReleasingManyTimesReturnsTheSameChannel(t *testing.T) {
	f := fake.New[cm, cmList]()
	c := acquire(t, manager.New(manager.Options{}), source(f))
	first, again := c.Release(), c.Release()
	if first != again || !closed(first) {
		t.Errorf("Release twice gave %v and %v (closed: %v), want one closed channel: the cache never started", first, again, closed(first))
	}
}

// Many goroutines acquiring and releasing the same cache at once never see two of it at
// a time while one handle is held, and leave nothing running once all are released.
func TestConcurrentAcquireAndRelease(t *testing.T) {
	const goroutines, rounds = 20, 10
	for _, tc := range []struct {
		name string
		// held: a handle is held throughout, so the cache must never restart.
		held bool
	}{
		{name: "while another handle is held, the one cache serves all", held: true},
		{name: "with no other handle, caches come and go and leave nothing behind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fake.New[cm, cmList](configMap("a", "one", nil))
			m := manager.New(manager.Options{})
			run(t, m)
			managerOnly := goleak.IgnoreCurrent()
			var holder *manager.Cache[cm]
			if tc.held {
				holder = acquire(t, m, source(f))
			}
			ctx := testContext(t)
			var wg sync.WaitGroup
			var failures atomic.Int32
			for range goroutines {
				wg.Go(func() {
					for range rounds {
						c, err := manager.Acquire(m, source(f))
						if err == nil {
							err = c.WaitForSync(ctx)
						}
						if err == nil {
							if _, ok := c.Get("a/one"); !ok {
								err = errors.New("a/one is not in the synced cache")
							}
						}
						if err != nil {
							t.Errorf("a handle: %v", err)
							failures.Add(1)
						}
						if c != nil {
							<-c.Release()
						}
					}
				})
			}
			wg.Wait()
			if tc.held {
				if n := lists(f); n != 1 {
					t.Errorf("the cache listed %d times while a handle was held throughout, want once", n)
				}
				receive(t, holder.Release(), "the cache stops with its last handle")
			}
			if n := f.Watching(); n != 0 {
				t.Errorf("%d watches open once all handles are released, want 0", n)
			}
			goleak.VerifyNone(t, managerOnly)
		})
	}
}

// The last Release racing with AddHandler through the same handle either lets AddHandler
// fail with ErrReleased or removes its handler; nothing is left running either way.
func TestLastReleaseWhileAHandlerIsBeingAdded(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil))
	m := manager.New(manager.Options{})
	run(t, m)
	managerOnly := goleak.IgnoreCurrent()
	outcomes := map[string]int{}
	for range 50 {
		c := acquire(t, m, source(f))
		added := make(chan error, 1)
		go func() {
			_, err := c.AddHandler("racer", controller.HandlerFunc[cm](func(context.Context, event.Event[cm]) {}))
			added <- err
		}()
		released := c.Release()
		switch err := receive(t, added, "AddHandler returns"); {
		case err == nil:
			outcomes["added, then removed by Release"]++
		case errors.Is(err, manager.ErrReleased):
			outcomes["refused: released"]++
		default:
			t.Fatalf("AddHandler racing Release = %v, want nil or ErrReleased", err)
		}
		receive(t, released, "the cache stops")
	}
	t.Logf("outcomes: %v", outcomes)
	goleak.VerifyNone(t, managerOnly)
}

// A cache of several namespaces reads as one store of all of them, and nothing else.
func TestNamespaceSetReadsAsOneStore(t *testing.T) {
	f := fake.New[cm, cmList](
		configMap("a", "one", map[string]string{"app": "web"}),
		configMap("a", "two", map[string]string{"app": "db"}),
		configMap("b", "three", map[string]string{"app": "web"}),
		configMap("c", "four", map[string]string{"app": "web"}),
	)
	m := manager.New(manager.Options{})
	run(t, m)
	c := acquire(t, m, source(f), manager.CacheOptions[cm]{Namespaces: []string{"b", "a"}, Indexers: byLabel("app")})
	defer c.Release()
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	getKey := func(key string) []string {
		if obj, ok := c.Get(key); ok {
			return keys([]cm{obj})
		}
		return []string{}
	}
	getName := func(ns, name string) []string {
		if obj, ok := c.GetByName(ns, name); ok {
			return keys([]cm{obj})
		}
		return []string{}
	}
	byIndex := func(value string) []string {
		objs, err := c.ByIndex("by-app", value)
		if err != nil {
			t.Fatalf("ByIndex: %v", err)
		}
		return keys(objs)
	}
	got := map[string][]string{
		`Get("a/one")`:            getKey("a/one"),
		`Get("b/three")`:          getKey("b/three"),
		`Get("c/four")`:           getKey("c/four"),
		`GetByName("a", "two")`:   getName("a", "two"),
		`GetByName("c", "four")`:  getName("c", "four"),
		`List()`:                  keys(c.List()),
		`InNamespace("b")`:        keys(c.InNamespace("b")),
		`InNamespace("c")`:        keys(c.InNamespace("c")),
		`ByIndex("by-app", web)`:  byIndex("web"),
		`ByIndex("by-app", "db")`: byIndex("db"),
		`Len()`:                   {fmt.Sprint(c.Len())},
	}
	want := map[string][]string{
		`Get("a/one")`:            {"a/one"},
		`Get("b/three")`:          {"b/three"},
		`Get("c/four")`:           {},
		`GetByName("a", "two")`:   {"a/two"},
		`GetByName("c", "four")`:  {},
		`List()`:                  {"a/one", "a/two", "b/three"},
		`InNamespace("b")`:        {"b/three"},
		`InNamespace("c")`:        {},
		`ByIndex("by-app", web)`:  {"a/one", "b/three"},
		`ByIndex("by-app", "db")`: {"a/two"},
		`Len()`:                   {"3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reads of the cache of namespaces a and b (-want +got):\n%s", diff)
	}
	if _, err := c.ByIndex("no-such-index", "x"); !errors.Is(err, eventcache.ErrNoIndex) {
		t.Errorf("ByIndex of an unknown index = %v, want ErrNoIndex", err)
	}
}

// A handler of a cache of several namespaces gets the events of all of them, one call at
// a time, as a handler of one controller does.
func TestHandlerOfANamespaceSetSeesEveryNamespaceOneEventAtATime(t *testing.T) {
	f := fake.New[cm, cmList]()
	for i := range 20 {
		for _, ns := range []string{"a", "b", "c"} {
			_ = must(f.Create(configMap(ns, fmt.Sprint("cm-", i), nil)))
		}
	}
	m := manager.New(manager.Options{})
	run(t, m)
	c := acquire(t, m, source(f), manager.CacheOptions[cm]{Namespaces: []string{"a", "b", "c"}})
	defer c.Release()
	var inFlight, overlaps atomic.Int32
	var mu sync.Mutex
	seen := map[string]bool{}
	reg, err := c.AddHandler("recorder", controller.HandlerFunc[cm](func(_ context.Context, e event.Event[cm]) {
		if inFlight.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inFlight.Add(-1)
		mu.Lock()
		seen[e.Key] = true
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("the handler was called %d times while another call ran", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(keys(c.List()), sortedKeys(seen)); diff != "" {
		t.Errorf("keys the handler saw (-cached +seen):\n%s", diff)
	}
}

func sortedKeys(set map[string]bool) []string { return slices.Sorted(maps.Keys(set)) }

func TestAReleasedHandleReadsNothing(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil))
	m := manager.New(manager.Options{})
	run(t, m)
	c := acquire(t, m, source(f))
	other := acquire(t, m, source(f)) // keeps the cache itself running
	defer other.Release()
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	c.Release()
	_, found := c.Get("a/one")
	_, addErr := c.AddHandler("late", controller.HandlerFunc[cm](func(context.Context, event.Event[cm]) {}))
	got := map[string]any{
		"Get":         found,
		"List":        len(c.List()),
		"Len":         c.Len(),
		"HasSynced":   c.HasSynced(),
		"WaitForSync": errors.Is(c.WaitForSync(testContext(t)), manager.ErrReleased),
		"AddHandler":  errors.Is(addErr, manager.ErrReleased),
	}
	want := map[string]any{"Get": false, "List": 0, "Len": 0, "HasSynced": false, "WaitForSync": true, "AddHandler": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a released handle (-want +got):\n%s", diff)
	}
	if _, ok := other.Get("a/one"); !ok {
		t.Error("another handle on the same cache lost a/one")
	}
}

// Releasing a handle removes the handlers added through it, and only those.
func TestReleaseRemovesTheHandlersOfItsHandle(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil))
	m := manager.New(manager.Options{})
	run(t, m)
	mine, theirs := acquire(t, m, source(f)), acquire(t, m, source(f))
	defer theirs.Release()
	events := map[string]chan string{"mine": make(chan string, 10), "theirs": make(chan string, 10)}
	for name, c := range map[string]*manager.Cache[cm]{"mine": mine, "theirs": theirs} {
		reg, err := c.AddHandler(name, controller.HandlerFunc[cm](func(_ context.Context, e event.Event[cm]) { events[name] <- e.Key }))
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.WaitForSync(testContext(t)); err != nil {
			t.Fatal(err)
		}
		receive(t, events[name], name+" gets the initial state")
	}
	mine.Release()
	_ = must(f.Create(configMap("a", "two", nil)))
	if key := receive(t, events["theirs"], "the other handle's handler gets the change"); key != "a/two" {
		t.Errorf("theirs got %s, want a/two", key)
	}
	select {
	case key := <-events["mine"]:
		t.Errorf("the handler of the released handle got %s", key)
	default:
	}
}

func TestACacheAcquiredBeforeRunStartsWithTheManager(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil))
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(f))
	defer c.Release()
	if lists(f) != 0 || c.HasSynced() {
		t.Fatalf("before Run: %d lists, synced %v; want none, false", lists(f), c.HasSynced())
	}
	run(t, m)
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("a/one"); !ok {
		t.Error("a/one is not cached once the manager runs")
	}
}

func TestAcquireRejectsBadInput(t *testing.T) {
	f := fake.New[cm, cmList]()
	stoppedManager := manager.New(manager.Options{})
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	if err := stoppedManager.Run(ctx); err != nil {
		t.Fatal(err)
	}
	withIndex := manager.New(manager.Options{})
	defer acquire(t, withIndex, source(f), manager.CacheOptions[cm]{Indexers: byLabel("x")}).Release()
	acquireCM := func(m *manager.Manager, src manager.Source[cm, cmList], opts ...manager.CacheOptions[cm]) error {
		c, err := manager.Acquire(m, src, opts...)
		if c != nil {
			c.Release()
		}
		return err
	}
	var nilFake *cmFake
	for _, tc := range []struct {
		name string
		err  error
		want error
		// wantText, when set, is in the error instead of want.
		wantText string
	}{{
		name: "nil manager",
		err:  acquireCM(nil, source(f)),
		want: controller.ErrNilArgument,
	}, {
		name: "a Source without a ListerWatcher",
		err:  acquireCM(manager.New(manager.Options{}), manager.Source[cm, cmList]{}),
		want: controller.ErrNilArgument,
	}, {
		name: "a Source made from a nil function",
		err:  acquireCM(manager.New(manager.Options{}), manager.Namespaced[cm, cmList, *cmFake](nil)),
		want: controller.ErrNilArgument,
	}, {
		name: "a Source that returns a typed nil ListerWatcher",
		err: acquireCM(manager.New(manager.Options{}), manager.Namespaced[cm](func(string) *cmFake { return nilFake }),
			manager.CacheOptions[cm]{Namespaces: []string{"a", "b"}}),
		want: controller.ErrNilArgument,
	}, {
		name: "a Source that panics",
		err: acquireCM(manager.New(manager.Options{}), manager.Namespaced[cm](func(string) *cmFake { panic("source boom") }),
			manager.CacheOptions[cm]{Namespaces: []string{"a"}}),
		wantText: "source boom",
	}, {
		name: `"" (all namespaces) among namespaces`,
		err:  acquireCM(manager.New(manager.Options{}), source(f), manager.CacheOptions[cm]{Namespaces: []string{"a", ""}}),
		want: manager.ErrScope,
	}, {
		name: "namespaces of a cluster-scoped resource",
		err: acquireCM(manager.New(manager.Options{}), manager.ClusterScoped[cm](f),
			manager.CacheOptions[cm]{Namespaces: []string{"a"}}),
		want: manager.ErrScope,
	}, {
		name: "a TransformName without a Transform",
		err:  acquireCM(manager.New(manager.Options{}), source(f), manager.CacheOptions[cm]{TransformName: "strip"}),
		want: controller.ErrNilArgument,
	}, {
		name: "an index named as the built-in namespace index",
		err:  acquireCM(withIndex, source(f), manager.CacheOptions[cm]{Indexers: eventcache.Indexers[cm]{eventcache.NamespaceIndex: byName}}),
		want: eventcache.ErrIndexExists,
	}, {
		name: "a nil index function",
		err:  acquireCM(withIndex, source(f), manager.CacheOptions[cm]{Indexers: eventcache.Indexers[cm]{"by-nothing": nil}}),
		want: controller.ErrNilArgument,
	}, {
		name: "two parts with different namespaces",
		err: acquireCM(manager.New(manager.Options{}), source(f),
			manager.CacheOptions[cm]{Namespaces: []string{"a"}}, manager.CacheOptions[cm]{Namespaces: []string{"b"}}),
		want: manager.ErrConflictingOptions,
	}, {
		name: "two parts with different label selectors",
		err: acquireCM(manager.New(manager.Options{}), source(f),
			manager.CacheOptions[cm]{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "web"})},
			manager.CacheOptions[cm]{LabelSelector: labels.SelectorFromSet(labels.Set{"app": "db"})}),
		want: manager.ErrConflictingOptions,
	}, {
		name: "two parts with a Transform each",
		err: acquireCM(manager.New(manager.Options{}), source(f),
			manager.CacheOptions[cm]{Transform: client.StripManagedFields[cm], TransformName: "strip"},
			manager.CacheOptions[cm]{Transform: client.StripManagedFields[cm], TransformName: "strip"}),
		want: manager.ErrConflictingOptions,
	}, {
		name: "an index name given twice",
		err:  acquireCM(manager.New(manager.Options{}), source(f), manager.Index("by-name", byName), manager.Index("by-name", byName)),
		want: manager.ErrConflictingOptions,
	}, {
		name: "a manager that has stopped",
		err:  acquireCM(stoppedManager, source(f)),
		want: manager.ErrStopped,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.wantText != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.wantText)):
				t.Errorf("Acquire = %v, want an error saying %q", tc.err, tc.wantText)
			case tc.wantText == "" && !errors.Is(tc.err, tc.want):
				t.Errorf("Acquire = %v, want %v", tc.err, tc.want)
			}
		})
	}
}

// Unstructured objects stand for any resource: only Source.Resource tells their caches
// apart, so it is required, and Dynamic sets it.
func TestUnstructuredCachesNeedAResource(t *testing.T) {
	type u = *unstructured.Unstructured
	type uList = *unstructured.UnstructuredList
	m := manager.New(manager.Options{})
	f := fake.New[u, uList]()
	_, err := manager.Acquire(m, manager.ClusterScoped[u](f))
	if !errors.Is(err, manager.ErrNoResource) {
		t.Errorf("Acquire of Unstructured without a Resource = %v, want ErrNoResource", err)
	}
	src := manager.ClusterScoped[u](f)
	src.Resource = "widgets.example.com"
	c, err := manager.Acquire(m, src)
	if err != nil {
		t.Fatalf("Acquire of Unstructured with a Resource = %v", err)
	}
	c.Release()
	_, err = manager.Acquire(m, manager.Dynamic(nil, corev1.SchemeGroupVersion.WithResource("configmaps"), false))
	if !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Acquire through a nil dynamic client = %v, want ErrNilArgument", err)
	}
}

// sink is one manager.Metrics for the whole family: it counts lists and reconciles by
// the name each call carries.
type sink struct {
	mu         sync.Mutex
	lists      map[string]int
	reconciles map[string]int
}

func (s *sink) Listed(name string, _ int, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists[name]++
}

func (s *sink) ReconcileLatency(loop string, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconciles[loop]++
}

func (s *sink) counts() (lists, reconciles map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.lists), maps.Clone(s.reconciles)
}

func (*sink) WatchEvent(string, watch.EventType)           {}
func (*sink) ResourceVersion(string, string)               {}
func (*sink) ListWatchError(string)                        {}
func (*sink) EventQueueDepth(string, int)                  {}
func (*sink) HandlerLatency(string, string, time.Duration) {}
func (*sink) HandlerPanic(string, string)                  {}
func (*sink) QueueDepth(string, int)                       {}
func (*sink) Retry(string)                                 {}
func (*sink) ReconcileError(string, bool)                  {}

// The Manager's ResyncPeriod and Metrics apply to every shared controller, and its
// Metrics to every Loop without metrics of its own: one sink, given once, to which each
// controller and loop reports under its own name.
func TestTheManagersCacheOptionsApplyToEverySharedController(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", nil), configMap("b", "two", nil))
	metrics := &sink{lists: map[string]int{}, reconciles: map[string]int{}}
	m := manager.New(manager.Options{ResyncPeriod: 10 * time.Millisecond, Metrics: metrics})
	run(t, m)
	both := acquire(t, m, source(f), manager.CacheOptions[cm]{Namespaces: []string{"a", "b"}})
	defer both.Release()
	a := acquire(t, m, source(f), manager.CacheOptions[cm]{Namespaces: []string{"a"}})
	defer a.Release()
	if err := both.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	reconciled := make(chan string, 100)
	if _, err := manager.NewLoop(a, typed.ReconcilerFunc[cm](func(_ context.Context, req typed.Request[cm]) (typed.Result, error) {
		reconciled <- req.Key
		return typed.Result{}, nil
	}), typed.Options{Name: "configmaps"}); err != nil {
		t.Fatal(err)
	}
	receive(t, reconciled, "a reconcile")
	// The latency of a reconcile is reported once it has returned.
	eventually(t, "the loop's metrics", func() bool { _, reconciles := metrics.counts(); return reconciles["configmaps"] > 0 })
	lists, reconciles := metrics.counts()
	if diff := cmp.Diff(map[string]int{"*v1.ConfigMap namespace=a": 1, "*v1.ConfigMap namespace=b": 1}, lists); diff != "" {
		t.Errorf("lists counted under each controller's name (-want +got):\n%s", diff)
	}
	if len(reconciles) != 1 {
		t.Errorf("reconciles counted under %v, want the loop's name alone", reconciles)
	}
	resynced := make(chan string, 100)
	if _, err := a.AddHandler("resync", controller.HandlerFunc[cm](func(_ context.Context, e event.Event[cm]) {
		if e.Sync && e.Type == event.Modified {
			resynced <- e.Key
		}
	})); err != nil {
		t.Fatal(err)
	}
	if key := receive(t, resynced, "a resync"); key != "a/one" {
		t.Errorf("resynced %s, want a/one", key)
	}
}

func TestDynamicSourceCachesOneResource(t *testing.T) {
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("ConfigMap")
	obj.SetNamespace("a")
	obj.SetName("one")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "ConfigMapList"}, obj)
	m := manager.New(manager.Options{})
	run(t, m)
	c, err := manager.Acquire(m, manager.Dynamic(dyn, gvr, false), manager.CacheOptions[*unstructured.Unstructured]{Namespaces: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{"name": c.Name(), "keys": keys(c.List())}
	want := map[string]any{"name": "configmaps.v1 namespace=a", "keys": []string{"a/one"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the dynamic cache (-want +got):\n%s", diff)
	}
}

// An Acquire adds the indexes the shared cache lacks, even while it runs, indexing the
// cached objects at once; an index name is the cache's, so every handle reads it.
func TestAcquireAddsTheIndexesTheSharedCacheLacks(t *testing.T) {
	labelled := func(ns, name, app, owner string) cm {
		return configMap(ns, name, map[string]string{"app": app, "owner": owner})
	}
	for _, tc := range []struct {
		name        string
		first, then manager.CacheOptions[cm]
		// reads are index=value lookups through then, and firstReads
		// those through first (the same when nil).
		reads, firstReads map[string][]string
	}{{
		name:  "an index the running cache lacks is added and reads its objects at once",
		first: manager.CacheOptions[cm]{Indexers: byLabel("app")},
		then:  manager.CacheOptions[cm]{Indexers: byLabel("owner")},
		reads: map[string][]string{"by-app=web": {"a/one", "b/three"}, "by-owner=x": {"a/one", "b/three"}, "by-owner=y": {"a/two"}},
	}, {
		name:  "an index of the same function is shared",
		first: manager.CacheOptions[cm]{Indexers: byLabel("app")},
		then:  manager.CacheOptions[cm]{Indexers: byLabel("app")},
		reads: map[string][]string{"by-app=db": {"a/two"}},
	}, {
		name:       "an index of a cache of several namespaces is added to each namespace's",
		first:      manager.CacheOptions[cm]{Namespaces: []string{"a"}},
		then:       manager.CacheOptions[cm]{Namespaces: []string{"a", "b"}, Indexers: byLabel("owner")},
		reads:      map[string][]string{"by-owner=x": {"a/one", "b/three"}},
		firstReads: map[string][]string{"by-owner=x": {"a/one"}}, // first's scope is namespace a
	}, {
		name:  "a taken name reads the cache's index, whatever function it is given with",
		first: manager.CacheOptions[cm]{Indexers: byLabel("app")},
		then:  manager.CacheOptions[cm]{Indexers: eventcache.Indexers[cm]{"by-app": byName}},
		reads: map[string][]string{"by-app=web": {"a/one", "b/three"}, "by-app=one": {}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := fake.New[cm, cmList](labelled("a", "one", "web", "x"), labelled("a", "two", "db", "y"), labelled("b", "three", "web", "x"))
			m := manager.New(manager.Options{})
			run(t, m)
			first := acquire(t, m, source(f), tc.first)
			defer first.Release()
			if err := first.WaitForSync(testContext(t)); err != nil {
				t.Fatal(err)
			}
			then := acquire(t, m, source(f), tc.then)
			defer then.Release()
			if err := then.WaitForSync(testContext(t)); err != nil {
				t.Fatal(err)
			}
			lookup := func(c *manager.Cache[cm], lookups map[string][]string) map[string][]string {
				got := map[string][]string{}
				for lookup := range lookups {
					index, value, _ := strings.Cut(lookup, "=")
					objs, err := c.ByIndex(index, value)
					if err != nil {
						t.Fatalf("ByIndex(%s): %v", lookup, err)
					}
					got[lookup] = keys(objs)
				}
				return got
			}
			firstReads := tc.firstReads
			if firstReads == nil {
				firstReads = tc.reads
			}
			if diff := cmp.Diff(tc.reads, lookup(then, tc.reads)); diff != "" {
				t.Errorf("index reads through the second handle (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(firstReads, lookup(first, firstReads)); diff != "" {
				t.Errorf("index reads through the first handle (-want +got):\n%s", diff)
			}
		})
	}
}

// Acquires that each add an index of their own while objects change leave the cache with
// every index, each agreeing with the cached objects.
func TestConcurrentAcquiresAddTheirIndexesWhileObjectsChange(t *testing.T) {
	const acquirers = 8
	f := fake.New[cm, cmList](configMap("a", "one", map[string]string{"l0": "v"}))
	m := manager.New(manager.Options{})
	run(t, m)
	holder := acquire(t, m, source(f))
	defer holder.Release()
	if err := holder.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	handles := make([]*manager.Cache[cm], acquirers)
	errs := make([]error, acquirers)
	for i := range acquirers {
		wg.Go(func() {
			handles[i], errs[i] = manager.Acquire(m, source(f), manager.CacheOptions[cm]{Indexers: byLabel(fmt.Sprint("l", i))})
		})
	}
	for i := range 20 {
		labels := map[string]string{}
		for l := range acquirers {
			if (i+l)%2 == 0 {
				labels[fmt.Sprint("l", l)] = "v"
			}
		}
		_ = must(f.Create(configMap("a", fmt.Sprint("cm-", i), labels)))
	}
	wg.Wait()
	for i, h := range handles {
		if errs[i] != nil {
			t.Fatalf("Acquire %d: %v", i, errs[i])
		}
		defer h.Release()
	}
	eventually(t, "the cache to hold every object", func() bool { return holder.Len() == 21 })
	got, want := map[string][]string{}, map[string][]string{}
	for l := range acquirers {
		index, label := fmt.Sprint("by-l", l), fmt.Sprint("l", l)
		objs, err := holder.ByIndex(index, "v")
		if err != nil {
			t.Fatalf("ByIndex(%s): %v", index, err)
		}
		got[index] = keys(objs)
		want[index] = []string{}
		for _, obj := range holder.List() {
			if obj.Labels[label] == "v" {
				want[index] = append(want[index], "a/"+obj.Name)
			}
		}
		slices.Sort(want[index])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("indexes against the cached objects (-want +got):\n%s", diff)
	}
}

// The parts of one user's options compose: each sets its own fields, and their indexes
// unite into the one cache, as if one CacheOptions had said it all.
func TestAcquireComposesTheOptionsOfOneUser(t *testing.T) {
	f := fake.New[cm, cmList](configMap("a", "one", map[string]string{"app": "web"}), configMap("b", "two", map[string]string{"app": "web"}))
	m := manager.New(manager.Options{})
	run(t, m)
	c := acquire(t, m, source(f),
		manager.CacheOptions[cm]{Namespaces: []string{"a"}},
		manager.Index("by-name", byName),
		manager.CacheOptions[cm]{Namespaces: []string{"a"}, Indexers: byLabel("app")})
	defer c.Release()
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	for _, index := range []struct{ name, value string }{{"by-name", "one"}, {"by-app", "web"}} {
		objs, err := c.ByIndex(index.name, index.value)
		if err != nil || len(objs) != 1 || objs[0].Namespace != "a" {
			t.Errorf("ByIndex(%s, %s) = %v, %v; want a/one alone", index.name, index.value, objs, err)
		}
	}
}
