package manager_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// A Loop over a cache of several namespaces is one typed.Loop: Options.Workers bounds the
// reconciles of all its namespaces together (it bounded each namespace's before), and a
// key is never reconciled by two goroutines at once (DESIGN 14), while the objects of
// every namespace change from two writers at once and the namespaces' controllers deliver
// their events on goroutines of their own.
func TestALoopOverSeveralNamespacesHasOneSetOfWorkers(t *testing.T) {
	var objs []cm
	for _, ns := range []string{"a", "b", "c"} {
		for _, name := range []string{"x", "y"} {
			objs = append(objs, configMap(ns, name, nil))
		}
	}
	f := fake.New[cm, cmList](objs...)
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(f), manager.CacheOptions[cm]{Namespaces: []string{"a", "b", "c"}})
	defer c.Release()
	var mu sync.Mutex
	inFlight := map[string]bool{}
	last := map[string]string{}
	running, most, overlaps := 0, 0, 0
	_, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](func(_ context.Context, req typed.Request[cm]) (typed.Result, error) {
		mu.Lock()
		if inFlight[req.Key] {
			overlaps++
		}
		inFlight[req.Key] = true
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(time.Millisecond) // widen the window two reconciles would share
		mu.Lock()
		defer mu.Unlock()
		delete(inFlight, req.Key)
		running--
		last[req.Key] = req.Object.Data["v"]
		return typed.Result{}, nil
	}), typed.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	const rounds = 20
	var writers sync.WaitGroup
	for w := range 2 {
		writers.Go(func() {
			for i := range rounds {
				for _, o := range objs[w*3 : w*3+3] {
					o = o.DeepCopy()
					o.Data = map[string]string{"v": fmt.Sprint(i)}
					if _, err := f.Update(o); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	writers.Wait()
	want := map[string]string{}
	for _, o := range objs {
		want[o.Namespace+"/"+o.Name] = fmt.Sprint(rounds - 1)
	}
	eventually(t, "every key reconciled in its last state", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return cmp.Equal(want, last)
	})
	mu.Lock()
	defer mu.Unlock()
	if overlaps > 0 {
		t.Errorf("%d reconciles of a key began while another of the same key ran", overlaps)
	}
	if most > 2 {
		t.Errorf("%d reconciles ran at once over 3 namespaces with Workers 2", most)
	}
}

// ByIndexIn reads one namespace's objects of an index, from a cache of several
// namespaces or of all of them, so that index values need not carry the namespace.
func TestByIndexInReadsOneNamespace(t *testing.T) {
	shop := map[string]string{"app": "shop"}
	f := fake.New[cm, cmList](configMap("a", "web", shop), configMap("a", "db", shop),
		configMap("b", "web", shop), configMap("b", "db", shop), configMap("c", "web", shop))
	byApp := manager.Index("app", func(o cm) ([]string, error) { return []string{o.Labels["app"]}, nil })
	m := manager.New(manager.Options{})
	some := acquire(t, m, source(f), manager.CacheOptions[cm]{Namespaces: []string{"a", "b"}}, byApp)
	defer some.Release()
	all := acquire(t, m, source(f), byApp)
	defer all.Release()
	run(t, m)
	for _, c := range []*manager.Cache[cm]{some, all} {
		if err := c.WaitForSync(testContext(t)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		cache     *manager.Cache[cm]
		namespace string
		want      []string
	}{
		{some, "a", []string{"a/db", "a/web"}},
		{some, "b", []string{"b/db", "b/web"}},
		{some, "c", []string{}}, // outside the cache
		{all, "a", []string{"a/db", "a/web"}},
		{all, "c", []string{"c/web"}},
		{all, "none", []string{}},
	} {
		objs, err := tc.cache.ByIndexIn(tc.namespace, "app", "shop")
		if err != nil {
			t.Fatalf("%s: ByIndexIn(%q): %v", tc.cache.Name(), tc.namespace, err)
		}
		if diff := cmp.Diff(tc.want, keys(objs)); diff != "" {
			t.Errorf("%s: ByIndexIn(%q) (-want +got):\n%s", tc.cache.Name(), tc.namespace, diff)
		}
	}
	for _, ns := range []string{"a", "c"} {
		if _, err := some.ByIndexIn(ns, "missing", "x"); !errors.Is(err, eventcache.ErrNoIndex) {
			t.Errorf("ByIndexIn(%q) of an index the cache lacks: err = %v, want ErrNoIndex", ns, err)
		}
	}
	var nilCache *manager.Cache[cm]
	if objs, err := nilCache.ByIndexIn("a", "app", "shop"); objs != nil || err != nil {
		t.Errorf("ByIndexIn of a nil cache = %v, %v; want nothing", objs, err)
	}
}

// Cache options given to Owns through Source.With are checked as Acquire checks them: a
// nil index function is an error of the declaration, never a panic at the first event
// (DESIGN 18), and the Builder releases what it acquired.
func TestOwnsWithANilIndexFunctionIsAnErrorOfTheDeclaration(t *testing.T) {
	m := manager.New(manager.Options{})
	b := manager.For(m, source(fake.New[cm, cmList]()))
	var nilIndex eventcache.IndexFunc[cm]
	if got := manager.Owns(b, source(fake.New[cm, cmList]()).With(manager.Index("owner", nilIndex))); got != nil {
		t.Errorf("Owns with a nil index function returned a cache")
	}
	if _, err := b.Complete(typed.ReconcilerFunc[cm](newReconciles().reconcile)); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Complete = %v, want an error wrapping ErrNilArgument", err)
	}
}

// A cache read before its Manager runs says why it holds nothing and does not sync, and
// so does the error of a wait for it that gives up, instead of a bare deadline.
func TestACacheWhoseManagerDoesNotRunSaysSo(t *testing.T) {
	m := manager.New(manager.Options{})
	c := acquire(t, m, source(fake.New[cm, cmList](configMap("a", "x", nil))))
	defer c.Release()
	if err := c.Err(); !errors.Is(err, manager.ErrNotStarted) {
		t.Errorf("Err before the Manager runs = %v, want ErrNotStarted", err)
	}
	ctx, cancel := context.WithTimeout(testContext(t), 50*time.Millisecond)
	defer cancel()
	if err := c.WaitForSync(ctx); !errors.Is(err, manager.ErrNotStarted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitForSync before the Manager runs = %v, want the deadline wrapping ErrNotStarted", err)
	}
	run(t, m)
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err once the Manager runs and the cache synced = %v, want nil", err)
	}
}

// readsOf is what every method of the read API answers for a cache of namespaces a,
// b and c.
type readsOf struct {
	Get, GetByName                    bool
	List, InNamespace, ByIndex, ByIdx []string
	Keys, Ranged, IndexValues         []string
	Len                               int
}

func readAll(t *testing.T, r eventcache.Reader[cm]) readsOf {
	t.Helper()
	var out readsOf
	_, out.Get = r.Get("a/web")
	_, out.GetByName = r.GetByName("b", "db")
	out.List, out.InNamespace, out.Keys = keys(r.List()), keys(r.InNamespace("a")), r.Keys()
	r.Range(func(key string, _ cm) bool { out.Ranged = append(out.Ranged, key); return len(out.Ranged) < 2 })
	out.Len = len(out.Ranged) + r.Len()
	var err error
	objs, err := r.ByIndex("app", "shop")
	if err != nil {
		t.Fatal(err)
	}
	out.ByIndex = keys(objs)
	if objs, err = r.ByIndexIn("b", "app", "shop"); err != nil {
		t.Fatal(err)
	}
	out.ByIdx = keys(objs)
	if out.IndexValues, err = r.IndexValues("app"); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		func() error { _, err := r.ByIndex("missing", "x"); return err }(),
		func() error { _, err := r.ByIndexIn("a", "missing", "x"); return err }(),
		func() error { _, err := r.IndexValues("missing"); return err }(),
	} {
		if !errors.Is(err, eventcache.ErrNoIndex) {
			t.Errorf("%T: a read of an index the cache lacks: err = %v, want ErrNoIndex", r, err)
		}
	}
	out.Ranged = []string{fmt.Sprint(len(out.Ranged))} // Range's order is no part of the API
	return out
}

// A controller's Store and the Manager's cache of several namespaces are one read API
// (eventcache.Reader), and answer alike for the same objects.
func TestAStoreAndAManagerCacheAnswerTheSameReadAPI(t *testing.T) {
	shop, blog := map[string]string{"app": "shop"}, map[string]string{"app": "blog"}
	objs := []cm{configMap("a", "web", shop), configMap("a", "db", blog), configMap("b", "web", shop),
		configMap("b", "db", shop), configMap("c", "web", blog)}
	byApp := func(o cm) ([]string, error) { return []string{o.Labels["app"]}, nil }

	ctrl := testctl.New(t, fake.New[cm, cmList](objs...), controller.Options[cm]{Indexers: eventcache.Indexers[cm]{"app": byApp}})
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := ctrl.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}

	m := manager.New(manager.Options{})
	c := acquire(t, m, source(fake.New[cm, cmList](objs...)), manager.CacheOptions[cm]{Namespaces: []string{"a", "b", "c"}}, manager.Index("app", byApp))
	defer c.Release()
	run(t, m)
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	want := readsOf{Get: true, GetByName: true, List: []string{"a/db", "a/web", "b/db", "b/web", "c/web"},
		InNamespace: []string{"a/db", "a/web"}, ByIndex: []string{"a/web", "b/db", "b/web"}, ByIdx: []string{"b/db", "b/web"},
		Keys: []string{"a/db", "a/web", "b/db", "b/web", "c/web"}, Ranged: []string{"2"}, IndexValues: []string{"blog", "shop"}, Len: 7}
	for _, r := range []eventcache.Reader[cm]{ctrl.Store(), c} {
		if diff := cmp.Diff(want, readAll(t, r)); diff != "" {
			t.Errorf("%T (-want +got):\n%s", r, diff)
		}
	}
}
