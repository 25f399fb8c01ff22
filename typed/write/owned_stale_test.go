package write_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/typed/write"
)

// greeting returns a mutation that sets the ConfigMap's greeting.
func greeting(g string) func(*corev1.ConfigMap) {
	return func(cm *corev1.ConfigMap) { cm.Data = map[string]string{"greeting": g} }
}

// DESIGN 20: compare-before-write compares with a state at least as new as the writer's
// own last write. With WithCache, CreateOrUpdate first compares with the cached object;
// before the watch delivered its first update, the cache still holds the state before it,
// and an update bringing the object back to that state must still be written.
func TestOwnedWithCacheAnUpdateFromAStaleCacheIsNeverLost(t *testing.T) {
	srv := newRVServer[*corev1.ConfigMap]("configmaps")
	stale := srv.put(t, owned("", map[string]string{"greeting": "hi"}, webRef))
	cache := mapCache[*corev1.ConfigMap]{"shop/web-config": stale}
	o := write.NewOwned[*appsv1.Deployment](srv.Namespace, deployKind).WithCache(cache)

	for _, g := range []string{"hello", "hi"} {
		change, err := o.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", greeting(g))
		if err != nil {
			t.Fatal(err)
		}
		if change != write.Updated {
			t.Errorf("setting the greeting %q returned %q, want %q", g, change, write.Updated)
		}
		if got := srv.stored(t, "shop", "web-config").Data["greeting"]; got != g {
			t.Fatalf("after setting the greeting %q with the cache at resource version %s, the server has %q",
				g, stale.ResourceVersion, got)
		}
	}
	// Each update is decided on the server's state: the cache's shows no change.
	want := repeat(2, "get shop/web-config", "update shop/web-config")
	if diff := cmp.Diff(want, srv.takeCalls()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}

// The other side of the same comparison: an object this writer already made as desired
// costs no API call, although the stale cache shows the old state.
func TestOwnedWithCacheAnObjectItAlreadyWroteIsNotReadOrWrittenAgainFromAStaleCache(t *testing.T) {
	srv := newRVServer[*corev1.ConfigMap]("configmaps")
	stale := srv.put(t, owned("", map[string]string{"greeting": "hi"}, webRef))
	cache := mapCache[*corev1.ConfigMap]{"shop/web-config": stale}
	o := write.NewOwned[*appsv1.Deployment](srv.Namespace, deployKind).WithCache(cache)

	for _, want := range []write.Change{write.Updated, write.Unchanged} {
		if change, err := o.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", greeting("hello")); change != want || err != nil {
			t.Fatalf("CreateOrUpdate = %q, %v; want %q, nil", change, err, want)
		}
	}
	if diff := cmp.Diff([]string{"get shop/web-config", "update shop/web-config"}, srv.takeCalls()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}

	// Once the cache has caught up, it is what is compared with, and the write forgotten.
	cache["shop/web-config"] = srv.stored(t, "shop", "web-config")
	if change, err := o.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", greeting("hello")); change != write.Unchanged || err != nil {
		t.Fatalf("CreateOrUpdate = %q, %v; want %q, nil", change, err, write.Unchanged)
	}
	if calls := srv.takeCalls(); len(calls) != 0 {
		t.Errorf("API calls: %v, want none", calls)
	}
	if got := o.RememberedWrites(); got != 0 {
		t.Errorf("the Owned still remembers %d writes after the cache caught up, want 0", got)
	}
}

// An object this writer created is not in the cache yet: the server decides, and a
// mutation back to what the object was created with is not lost either.
func TestOwnedWithCacheAnObjectItCreatedIsReadFromTheServerUntilCached(t *testing.T) {
	srv := newRVServer[*corev1.ConfigMap]("configmaps")
	o := write.NewOwned[*appsv1.Deployment](srv.Namespace, deployKind).WithCache(mapCache[*corev1.ConfigMap]{})

	for _, step := range []struct {
		greeting string
		want     write.Change
	}{{"hello", write.Created}, {"hi", write.Updated}, {"hello", write.Updated}, {"hello", write.Unchanged}} {
		change, err := o.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", greeting(step.greeting))
		if change != step.want || err != nil {
			t.Fatalf("setting the greeting %q = %q, %v; want %q, nil", step.greeting, change, err, step.want)
		}
		if got := srv.stored(t, "shop", "web-config").Data["greeting"]; got != step.greeting {
			t.Fatalf("after setting the greeting %q the server has %q", step.greeting, got)
		}
	}
}

// Resource versions that are not decimal cannot be ordered: a cached object at one other
// than the last write's is not compared with, and the server decides.
func TestOwnedWithCacheDoesNotTrustACacheWhoseResourceVersionsCannotBeOrdered(t *testing.T) {
	srv := newRVServer[*corev1.ConfigMap]("configmaps")
	srv.opaque = true
	stale := srv.put(t, owned("", map[string]string{"greeting": "hi"}, webRef))
	o := write.NewOwned[*appsv1.Deployment](srv.Namespace, deployKind).
		WithCache(mapCache[*corev1.ConfigMap]{"shop/web-config": stale})

	for _, g := range []string{"hello", "hi"} {
		if change, err := o.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", greeting(g)); change != write.Updated || err != nil {
			t.Fatalf("setting the greeting %q = %q, %v; want %q, nil", g, change, err, write.Updated)
		}
		if got := srv.stored(t, "shop", "web-config").Data["greeting"]; got != g {
			t.Fatalf("after setting the greeting %q the server has %q", g, got)
		}
	}
}

// An Owned without a cache reads the server before every write, so it has nothing to
// correct: it keeps none of the objects it writes (up to 4096 of them, for 10 minutes,
// for nothing, before).
func TestOwnedWithoutACacheRemembersNothing(t *testing.T) {
	srv := newRVServer[*corev1.ConfigMap]("configmaps")
	o := write.NewOwned[*appsv1.Deployment](srv.Namespace, deployKind)
	for _, g := range []string{"hello", "hi"} {
		if _, err := o.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", greeting(g)); err != nil {
			t.Fatal(err)
		}
	}
	if got := srv.stored(t, "shop", "web-config").Data["greeting"]; got != "hi" {
		t.Errorf("the server has %q, want hi", got)
	}
	if n := o.RememberedWrites(); n != 0 {
		t.Errorf("an Owned without a cache remembers %d writes, want none", n)
	}
}
