package e2e

// Sharding (typed/shard): replicas dividing the keys of one loop through Leases, with the
// API server filtering each replica's caches to its shards.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/internal/testsupport/shardreplica"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/shard"
)

func TestShardedReplicasReconcileEachKeyOnceAtATimeThroughACrashAndAJoin(t *testing.T) {
	const (
		namespace = "shards"
		objects   = 1000
		shards    = 32
	)
	cp, admin := setUp(t, namespace)
	fast := rest.CopyConfig(cp.AdminConfig())
	fast.QPS, fast.Burst = 2000, 4000
	writer := newClients(t, fast).kube
	space := shard.Space{Shards: shards}

	keys := make([]string, objects)
	versions := make([]int, objects) // the last version written of each object, by index
	parallel(t, objects, func(ctx context.Context, i int) error {
		keys[i] = namespace + "/" + cmName(i)
		_, err := writer.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: cmName(i)}, Data: map[string]string{"v": "0"},
		}, metav1.CreateOptions{})
		return err
	})

	log := &shardreplica.Log{}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0)))
	ctx := klog.NewContext(t.Context(), logger)
	cfg := shardreplica.Config{
		Rest: fast, Namespace: namespace, Group: "e2e", Space: space,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		// A reconcile takes time: overlaps have room to show.
		Workers: 4, Reconcile: log.Reconcile(2 * time.Millisecond),
	}
	replicas := map[string]*shardreplica.Replica{}
	startReplica := func(name string, cfg shardreplica.Config) *shardreplica.Replica {
		r, err := shardreplica.Start(ctx, cfg, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop() }) // a crashed replica fails to delete its member Lease
		return r
	}
	for _, name := range []string{"a", "b", "c"} {
		replicas[name] = startReplica(name, cfg)
	}
	// An unsharded observer watches every object, for the bytes a replica would receive
	// without server-side filtering.
	all := cfg
	all.Group, all.Space = "e2e-all", shard.Space{Shards: 1}
	all.Reconcile = func(context.Context, string, typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
		return typed.Result{}, nil
	}
	observer := startReplica("observer", all)

	settleShards(t, space, replicas, "a", "b", "c")
	waitFor(t, "every key reconciled", func() bool { return log.ReconciledAtLeast(keys, 0) })

	// (d) Each replica caches exactly the objects of its shards: per shard, as many as the
	// hash puts there.
	perShard := make([]int, shards)
	listed, err := listConfigMaps(admin.kube, namespace)(timeout(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range listed {
		perShard[space.Of(o)]++
	}
	waitFor(t, "each replica to cache exactly its shards' objects", func() bool {
		for _, name := range []string{"a", "b", "c"} {
			for i, n := range replicas[name].Loop.Cached() {
				if perShard[i] != n {
					return false
				}
			}
		}
		return true
	})
	for _, name := range []string{"a", "b", "c"} {
		total := 0
		for _, n := range replicas[name].Loop.Cached() {
			total += n
		}
		t.Logf("replica %s caches %d of %d objects in shards %v", name, total, objects, replicas[name].Sharder.Held())
	}

	// (d) With the server filtering, an update of every object reaches each replica as
	// the bytes of its share only (the ConfigMaps' watches, without the Leases').
	before := map[string]int64{"observer": observer.ObjectBytesReceived()}
	for name, r := range replicas {
		before[name] = r.ObjectBytesReceived()
	}
	writeAll(t, writer, namespace, versions, 1)
	waitFor(t, "every key reconciled at version 1", func() bool { return log.ReconciledAtLeast(keys, 1) })
	time.Sleep(4 * retryPeriod) // the observer's watch may trail the replicas'
	unsharded := observer.ObjectBytesReceived() - before["observer"]
	for _, name := range []string{"a", "b", "c"} {
		got := replicas[name].ObjectBytesReceived() - before[name]
		cached := 0
		for _, n := range replicas[name].Loop.Cached() {
			cached += n
		}
		share := float64(cached) / objects
		t.Logf("updating every object: replica %s, caching %.2f of the objects, received %d bytes, an unsharded watch %d (%.2f)",
			name, share, got, unsharded, float64(got)/float64(unsharded))
		if float64(got) > (share+0.1)*float64(unsharded) {
			t.Errorf("replica %s, caching %.2f of the objects, received %d bytes while an unsharded watch received %d: the server did not filter", name, share, got, unsharded)
		}
	}
	if err := observer.Stop(); err != nil {
		t.Error(err)
	}

	// Changes go on through a crash and a join.
	var churnMu sync.Mutex
	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		r := rand.New(rand.NewPCG(1, 2))
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-churnCtx.Done():
				return
			case <-tick.C:
			}
			i := r.IntN(objects)
			churnMu.Lock()
			versions[i]++
			v := versions[i]
			churnMu.Unlock()
			at := time.Now()
			if _, err := writer.CoreV1().ConfigMaps(namespace).Update(churnCtx, configMap(i, v), metav1.UpdateOptions{}); err != nil {
				if churnCtx.Err() == nil {
					t.Errorf("churn: %v", err)
				}
				return
			}
			log.Changed(shardreplica.Change{Key: keys[i], Version: v, At: at})
		}
	}()

	time.Sleep(2 * time.Second)
	crashed := time.Now()
	replicas["c"].Crash()
	settleShards(t, space, replicas, "a", "b")
	time.Sleep(2 * time.Second)
	replicas["d"] = startReplica("d", cfg)
	settleShards(t, space, replicas, "a", "b", "d")
	time.Sleep(2 * time.Second)
	stopChurn()
	<-churned

	// (b) Every change is reconciled, by a live replica once the crashed one has given
	// up, within a lease duration and 10 seconds.
	bound := leaseDuration + 10*time.Second
	var seen map[shardreplica.Change]shardreplica.Reconcile
	waitUntil(t, "every change reconciled", func() (bool, string) {
		var missed []shardreplica.Change
		seen, missed = log.Seen()
		return len(missed) == 0, fmt.Sprintf("%d not reconciled, first %v", len(missed), missed[:min(len(missed), 3)])
	})
	slowest := time.Duration(0)
	for c, r := range seen {
		took := r.End.Sub(c.At)
		slowest = max(slowest, took)
		if took > bound {
			t.Errorf("%s version %d, changed at %v, was reconciled by %s %v later, more than %v", c.Key, c.Version, c.At.Format(time.StampMilli), r.Replica, took, bound)
		}
		if r.Replica == "c" && c.At.After(crashed.Add(renewDeadline+retryPeriod)) {
			t.Errorf("%s version %d, changed %v after the crash, was reconciled by the crashed replica", c.Key, c.Version, c.At.Sub(crashed))
		}
	}
	t.Logf("%d changes during the crash and the join; the slowest was reconciled %v after it was written (bound %v)", len(seen), slowest, bound)

	// (a) No key was ever reconciled by two replicas at once.
	if o := log.Overlaps(); len(o) != 0 {
		t.Errorf("%d reconciles overlapped with another replica's of the same key, first: %v", len(o), o[:min(len(o), 5)])
	}
}

// settleShards waits until the named replicas hold every shard once, and checks the
// balance bound: none holds more than ceil(1.5*S/N).
func settleShards(t *testing.T, space shard.Space, replicas map[string]*shardreplica.Replica, names ...string) {
	t.Helper()
	started := time.Now()
	var held map[string][]int
	waitUntil(t, fmt.Sprintf("replicas %v to hold every shard once, evenly", names), func() (bool, string) {
		held = map[string][]int{}
		var all []int
		for _, n := range names {
			held[n] = replicas[n].Sharder.Held()
			all = append(all, held[n]...)
		}
		for n, r := range replicas {
			if !slices.Contains(names, n) && len(r.Sharder.Held()) > 0 {
				return false, fmt.Sprintf("%s, not running, holds %v", n, r.Sharder.Held())
			}
		}
		slices.Sort(all)
		if len(all) != space.Shards || len(slices.Compact(slices.Clone(all))) != space.Shards {
			return false, fmt.Sprintf("held: %v", held)
		}
		even := (space.Shards + len(names) - 1) / len(names)
		for _, hs := range held {
			if len(hs) > even+1 {
				return false, fmt.Sprintf("still settling to Assign's cap: %v", held)
			}
		}
		return true, ""
	})
	bound := (3*space.Shards + 2*len(names) - 1) / (2 * len(names))
	for n, hs := range held {
		if len(hs) > bound {
			t.Errorf("%s holds %d shards, more than ceil(1.5*%d/%d) = %d", n, len(hs), space.Shards, len(names), bound)
		}
	}
	t.Logf("settled in %v: %v", time.Since(started).Round(time.Millisecond), held)
}

func cmName(i int) string { return fmt.Sprintf("cm-%04d", i) }

func configMap(i, v int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName(i)}, Data: map[string]string{"v": strconv.Itoa(v)}}
}

// writeAll sets every object's version to v.
func writeAll(t *testing.T, kube kubernetes.Interface, namespace string, versions []int, v int) {
	t.Helper()
	parallel(t, len(versions), func(ctx context.Context, i int) error {
		versions[i] = v
		_, err := kube.CoreV1().ConfigMaps(namespace).Update(ctx, configMap(i, v), metav1.UpdateOptions{})
		return err
	})
}

// parallel runs f for 0..n-1 on 16 goroutines and fails the test on the first error.
func parallel(t *testing.T, n int, f func(ctx context.Context, i int) error) {
	t.Helper()
	ctx := timeout(t)
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, n)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}
