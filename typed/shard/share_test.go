package shard_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// fakeSource is the Source of every object of f, which holds all namespaces: a cache of
// one namespace would get all of them, so the test fails on one.
func fakeSource[T event.Object, L fake.List](t *testing.T, f *fake.ListerWatcher[T, L]) manager.Source[T, L] {
	return manager.Source[T, L]{ListerWatcher: func(ns string) controller.ListerWatcher[T, L] {
		if ns != "" {
			t.Errorf("a cache of namespace %q; the test's caches are of all namespaces", ns)
		}
		return f
	}}
}

// opened returns, for each shard selector ("" for none), the Lists and Watches made
// through f. A fence's read of one object (DESIGN 19) is not the cache's list, and is
// left out.
func opened[T event.Object, L fake.List](f *fake.ListerWatcher[T, L]) map[string][]string {
	out := map[string][]string{}
	for _, a := range f.Actions() {
		if a.Verb == fake.VerbList && a.Options.Limit == 1 {
			continue
		}
		out[a.Options.ShardSelector] = append(out[a.Options.ShardSelector], a.Verb)
	}
	return out
}

// keyRecorder records the keys a loop reconciled, and the data each saw.
type keyRecorder struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (r *keyRecorder) reconciler() typed.Reconciler[*corev1.ConfigMap] {
	return typed.ReconcilerFunc[*corev1.ConfigMap](func(_ context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen == nil {
			r.seen = map[string][]string{}
		}
		v := "deleted"
		if req.Object != nil {
			v = req.Object.Data["v"]
		}
		r.seen[req.Key] = append(r.seen[req.Key], v)
		return typed.Result{}, nil
	})
}

// saw reports whether every key of keys was reconciled seeing data v.
func (r *keyRecorder) saw(keys []string, v string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if !slices.Contains(r.seen[k], v) {
			return false
		}
	}
	return true
}

// count returns the reconciles of key so far.
func (r *keyRecorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen[key])
}

// TestLoopsOnOneSharderShareOneWatchPerShardAndRelatedByUIDSharesTheManagersCache proves
// the sharing of DESIGN 16 across sharded loops: two Loops over the same Source, run on
// the shards of one Sharder (RunShard of both from one Sharder.Run), open one List and
// one Watch per shard held, not one per Loop; and a Related cache of all Secrets (ByUID)
// is the very watch that a manager.Acquire of Secrets in the same Manager gets.
func TestLoopsOnOneSharderShareOneWatchPerShardAndRelatedByUIDSharesTheManagersCache(t *testing.T) {
	space := shard.Space{Shards: 2, By: shard.ByUID}
	const perShard = 3
	var cms []*corev1.ConfigMap
	var secrets []*corev1.Secret
	var keys []string
	for i := range space.Shards {
		for j := range perShard {
			name := fmt.Sprintf("cm-%d-%d", i, j)
			for { // a UID in shard i, so that both shards hold objects
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uuid.NewUUID()}, Data: map[string]string{"v": "1"}}
				if space.Of(cm) == i {
					cms = append(cms, cm)
					break
				}
			}
			secrets = append(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uuid.NewUUID()}})
			keys = append(keys, "default/"+name)
		}
	}
	cmFake := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](cms...)
	secretFake := fake.New[*corev1.Secret, *corev1.SecretList](secrets...)
	cmSrc, secretSrc := fakeSource(t, cmFake), fakeSource(t, secretFake)

	m := runManager(t)
	s, err := shard.New(shard.Options{
		Client: leasefake.NewServer().CoordinationV1(), Namespace: "default", Name: "share", Identity: "a", Space: space,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var first, second keyRecorder
	loopA, err := shard.NewLoop(m, s, cmSrc, first.reconciler(), typed.Options{Name: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if err := shard.Related(loopA, secretSrc, func(s *corev1.Secret) []string { return []string{s.Namespace + "/" + s.Name} }); err != nil {
		t.Fatal(err)
	}
	loopB, err := shard.NewLoop(m, s, cmSrc, second.reconciler(), typed.Options{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	// The Manager's own cache of every Secret, as a manager.Loop or a reconciler reads it.
	secretCache, err := manager.Acquire(m, secretSrc)
	if err != nil {
		t.Fatal(err)
	}
	defer secretCache.Release()

	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	done := make(chan error, 1)
	go func() {
		// RunShard's documented use: several loops on the shards of one Sharder.
		done <- s.Run(ctx, func(ctx context.Context, sh shard.Shard) {
			var wg sync.WaitGroup
			wg.Go(func() { loopA.RunShard(ctx, sh) })
			wg.Go(func() { loopB.RunShard(ctx, sh) })
			wg.Wait()
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Sharder.Run: %v", err)
		}
	}()

	waitFor(t, "both loops to hold both shards", func() bool {
		return len(loopA.Cached()) == space.Shards && len(loopB.Cached()) == space.Shards
	})
	waitFor(t, "every key reconciled by both loops", func() bool { return first.saw(keys, "1") && second.saw(keys, "1") })
	if err := secretCache.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := map[int]int{0: perShard, 1: perShard}
	if diff := cmp.Diff(want, loopA.Cached()); diff != "" {
		t.Errorf("objects the first loop caches per shard (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, loopB.Cached()); diff != "" {
		t.Errorf("objects the second loop caches per shard (-want +got):\n%s", diff)
	}

	// A change reaches both loops through the one watch of its shard, and a Secret's
	// change the first loop's key through the Manager's cache of Secrets.
	cm := cms[0].DeepCopy()
	cm.Data = map[string]string{"v": "2"}
	if _, err := cmFake.Update(cm); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change reconciled by both loops", func() bool {
		return first.saw(keys[:1], "2") && second.saw(keys[:1], "2")
	})
	last := keys[len(keys)-1]
	before := first.count(last)
	secret := secrets[len(secrets)-1].DeepCopy()
	secret.StringData = map[string]string{"v": "2"}
	if _, err := secretFake.Update(secret); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Secret's change to reconcile its ConfigMap", func() bool { return first.count(last) > before })
	waitFor(t, "the Manager's cache of Secrets to see the change", func() bool {
		s, ok := secretCache.Get(last)
		return ok && s.StringData["v"] == "2"
	})

	// One watch-list (a Manager's cache lists with one by default, and watches on with
	// it) per shard held, whatever the loops on it; one of all Secrets, whoever asked for
	// it.
	wantOpened := map[string][]string{
		space.Selector([]int{0}): {fake.VerbWatch},
		space.Selector([]int{1}): {fake.VerbWatch},
	}
	if diff := cmp.Diff(wantOpened, opened(cmFake)); diff != "" {
		t.Errorf("ConfigMaps listed and watched, by shard selector (-want +got):\n%s", diff)
	}
	// Each shard's cache was fenced as the shard joined, before its keys were reconciled:
	// a consistent read of one object, with the shard's selector.
	fenced := map[string]bool{}
	for _, a := range cmFake.Actions() {
		if a.Verb == fake.VerbList && a.Options.Limit == 1 {
			fenced[a.Options.ShardSelector] = true
		}
	}
	if want := map[string]bool{space.Selector([]int{0}): true, space.Selector([]int{1}): true}; !cmp.Equal(want, fenced) {
		t.Errorf("shards fenced: %v; want %v", fenced, want)
	}
	if n := cmFake.Watching(); n != space.Shards {
		t.Errorf("%d watches of ConfigMaps open, want %d: one per shard held", n, space.Shards)
	}
	if diff := cmp.Diff(map[string][]string{"": {fake.VerbWatch}}, opened(secretFake)); diff != "" {
		t.Errorf("Secrets listed and watched, by shard selector (-want +got):\n%s", diff)
	}
	if n := secretFake.Watching(); n != 1 {
		t.Errorf("%d watches of Secrets open, want 1: the Related cache is the Manager's", n)
	}
}

// A Related cache of a namespaced kind is scoped to the Loop's namespaces as they are when
// a shard runs, also when WithCacheOptions comes after Related.
func TestRelatedCachesTakeTheLoopsNamespacesWhateverTheOrderOfTheCalls(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]bool{}
	secretFake := fake.New[*corev1.Secret, *corev1.SecretList]()
	secretSrc := manager.Source[*corev1.Secret, *corev1.SecretList]{ListerWatcher: func(ns string) controller.ListerWatcher[*corev1.Secret, *corev1.SecretList] {
		mu.Lock()
		asked[ns] = true
		mu.Unlock()
		return secretFake
	}}
	cmFake := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList]()
	cmSrc := manager.Source[*corev1.ConfigMap, *corev1.ConfigMapList]{ListerWatcher: func(string) controller.ListerWatcher[*corev1.ConfigMap, *corev1.ConfigMapList] {
		return cmFake
	}}
	m := runManager(t)
	s, err := shard.New(shard.Options{
		Client: leasefake.NewServer().CoordinationV1(), Namespace: "default", Name: "order", Identity: "a", Space: shard.Space{Shards: 1},
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var rec keyRecorder
	loop, err := shard.NewLoop(m, s, cmSrc, rec.reconciler(), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := shard.Related(loop, secretSrc, func(s *corev1.Secret) []string { return nil }); err != nil {
		t.Fatal(err)
	}
	loop.WithCacheOptions(manager.CacheOptions[*corev1.ConfigMap]{Namespaces: []string{"only"}})

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	waitFor(t, "the shard's caches", func() bool { return len(loop.Cached()) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(map[string]bool{"only": true}, asked); diff != "" {
		t.Errorf("namespaces the Related Secrets were asked for (-want +got):\n%s", diff)
	}
}

// A sharded Loop whose Manager does not run reconciles nothing, since its shards' caches
// never start; it says so at the default log level, naming why, rather than waiting in
// silence.
func TestAShardWhoseManagerDoesNotRunSaysWhyItReconcilesNothing(t *testing.T) {
	cmFake := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}})
	m := manager.New(manager.Options{}) // never run
	s, err := shard.New(shard.Options{
		Client: leasefake.NewServer().CoordinationV1(), Namespace: "default", Name: "idle", Identity: "a", Space: shard.Space{Shards: 1},
		LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var rec keyRecorder
	loop, err := shard.NewLoop(m, s, fakeSource(t, cmFake), rec.reconciler(), typed.Options{Name: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	logCtx, logs := bufferedContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	waitFor(t, "the log line saying why the shard reconciles nothing", func() bool {
		return strings.Contains(logs.String(), "has not synced") && strings.Contains(logs.String(), manager.ErrNotStarted.Error())
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if rec.count("default/a") != 0 {
		t.Errorf("a shard whose cache never started reconciled default/a")
	}
}

// A shard's caches are stopped, their watches closed, once the shard's last user leaves
// (DESIGN 16), while the Manager runs on; a cache that the Manager's other users still
// hold (the Secrets a ByUID Related shares with them) keeps its watch.
func TestAShardGivenUpStopsTheCachesOnlyItUsed(t *testing.T) {
	cmFake := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}})
	secretFake := fake.New[*corev1.Secret, *corev1.SecretList]()
	m := runManager(t)
	secrets, err := manager.Acquire(m, fakeSource(t, secretFake))
	if err != nil {
		t.Fatal(err)
	}
	defer secrets.Release()
	s, err := shard.New(shard.Options{
		Client: leasefake.NewServer().CoordinationV1(), Namespace: "default", Name: "leave", Identity: "a", Space: shard.Space{Shards: 2},
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var rec keyRecorder
	loop, err := shard.NewLoop(m, s, fakeSource(t, cmFake), rec.reconciler(), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := shard.Related(loop, fakeSource(t, secretFake), func(*corev1.Secret) []string { return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	waitFor(t, "both shards held, their caches watching", func() bool { return len(loop.Cached()) == 2 && cmFake.Watching() == 2 })
	if n := secretFake.Watching(); n != 1 {
		t.Errorf("%d watches of Secrets while the shards relate them, want the Manager's one", n)
	}
	cancel() // the replica gives its shards up; the Manager runs on
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shards' watches closed", func() bool { return cmFake.Watching() == 0 })
	if n := secretFake.Watching(); n != 1 {
		t.Errorf("%d watches of Secrets once the shards left, want the one the Manager's other user holds", n)
	}
}
