package manager_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// A Loop over a cache of several namespaces is one typed.Loop: Options.Workers bounds the
// reconciles of all its namespaces together (it bounded each namespace's before).
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
	var running, most atomic.Int32
	done := make(chan string, 10)
	_, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](func(_ context.Context, req typed.Request[cm]) (typed.Result, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			if old := most.Load(); n <= old || most.CompareAndSwap(old, n) {
				break
			}
		}
		done <- req.Key
		return typed.Result{}, nil
	}), typed.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	got := map[string]bool{}
	for range 6 {
		got[receive(t, done, "a reconcile")] = true
	}
	want := map[string]bool{"a/x": true, "a/y": true, "b/x": true, "b/y": true, "c/x": true, "c/y": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys reconciled (-want +got):\n%s", diff)
	}
	if most.Load() > 2 {
		t.Errorf("%d reconciles ran at once over 3 namespaces with Workers 2", most.Load())
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
