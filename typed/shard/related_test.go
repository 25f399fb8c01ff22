package shard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// TestRelatedObjectsReconcileTheirKeyOnlyOnTheReplicaHoldingIt checks both ways a sharded
// loop follows a related kind: per shard, filtered like the primary (by namespace), or
// through one cache of the replica (by UID).
func TestRelatedObjectsReconcileTheirKeyOnlyOnTheReplicaHoldingIt(t *testing.T) {
	for _, by := range []shard.By{shard.ByNamespace, shard.ByUID} {
		t.Run(by.String(), func(t *testing.T) {
			const pairs = 24
			var objs []runtime.Object
			var keys []string
			for range pairs {
				ns := "ns-" + string(uuid.NewUUID()) // random: FNV-1a spreads similar names badly
				objs = append(objs,
					&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "config", UID: uuid.NewUUID()}},
					&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "config", UID: uuid.NewUUID()}, StringData: map[string]string{"v": "1"}})
				keys = append(keys, ns+"/config")
			}
			cluster := fake.NewClientset(objs...)
			leases := leasefake.NewServer().CoordinationV1()

			var mu sync.Mutex
			reconciledBy := map[string][]string{} // key -> replicas, in order
			loops := map[string]*shard.Loop[*corev1.ConfigMap]{}
			var wg sync.WaitGroup
			_, logCtx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(logCtx)
			defer func() { cancel(); wg.Wait() }()
			for _, name := range []string{"a", "b"} {
				s, err := shard.New(shard.Options{
					Client: leases, Namespace: "default", Name: "related", Identity: name, Space: shard.Space{Shards: 8, By: by},
					LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
				})
				if err != nil {
					t.Fatal(err)
				}
				loop, err := shard.NewLoop(runManager(t), s, configMapSource(cluster), typed.ReconcilerFunc[*corev1.ConfigMap](
					func(_ context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
						// The replica reconciling a key holds its shard, and so caches it
						// (every key's ConfigMap exists): a shard may move under load, when a
						// heartbeat is late, but never to two replicas at once.
						if _, ok := loops[name].Get(req.Key); !ok || req.Deleted {
							t.Errorf("%s reconciled by %s, which does not cache it (deleted: %t)", req.Key, name, req.Deleted)
						}
						mu.Lock()
						reconciledBy[req.Key] = append(reconciledBy[req.Key], name)
						mu.Unlock()
						return typed.Result{}, nil
					}), typed.Options{})
				if err != nil {
					t.Fatal(err)
				}
				shard.Related(loop, secretSource(cluster), func(s *corev1.Secret) []string {
					return []string{s.Namespace + "/" + s.Name}
				})
				loops[name] = loop
			}
			for name, loop := range loops { // started once loops is written: reconcilers read it
				wg.Go(func() {
					if err := loop.Run(ctx); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				})
			}
			holder := func(key string) string {
				_, a := loops["a"].Get(key)
				_, b := loops["b"].Get(key)
				switch {
				case a && !b:
					return "a"
				case b && !a:
					return "b"
				}
				return ""
			}
			// Settled: each key cached by one replica, both replicas holding some.
			waitFor(t, "the replicas to divide the keys", func() bool {
				n := map[string]int{}
				for _, k := range keys {
					n[holder(k)]++
				}
				na, nb := len(loops["a"].Cached()), len(loops["b"].Cached())
				return n[""] == 0 && na+nb == 8 && na <= 5 && nb <= 5 // Assign's cap for 8 shards and 2 replicas
			})
			waitFor(t, "every key reconciled", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(reconciledBy) == pairs
			})
			mu.Lock()
			clear(reconciledBy)
			mu.Unlock()

			// A change of each Secret reconciles its ConfigMap's key, on its holder only.
			for _, o := range objs {
				if s, ok := o.(*corev1.Secret); ok {
					s = s.DeepCopy()
					s.StringData = map[string]string{"v": "2"}
					if _, err := cluster.CoreV1().Secrets(s.Namespace).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			waitFor(t, "every key reconciled after its Secret changed", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(reconciledBy) == pairs
			})
			time.Sleep(200 * time.Millisecond) // room for a wrong replica's reconcile to show
		})
	}
}

// TestRelatedByNamespaceKeepsKeysOfOtherShardsOutOfTheShard checks that a related object
// mapped to a key of another namespace's shard does not reconcile that key in its own
// shard, where the key's object is not cached and would look deleted: it is reported.
func TestRelatedByNamespaceKeepsKeysOfOtherShardsOutOfTheShard(t *testing.T) {
	space := shard.Space{Shards: 2, By: shard.ByNamespace}
	// Two namespaces in different shards.
	var nsOf [2]string
	for i := 0; nsOf[0] == "" || nsOf[1] == ""; i++ {
		ns := "ns-" + string(uuid.NewUUID())
		nsOf[space.OfHash(shard.Hash(ns))] = ns
	}
	cluster := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: nsOf[1], Name: "config", UID: uuid.NewUUID()}},
		// In shard 0, but mapped to the ConfigMap of shard 1.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsOf[0], Name: "config", UID: uuid.NewUUID()}},
	)
	s, err := shard.New(shard.Options{
		Client: leasefake.NewServer().CoordinationV1(), Namespace: "default", Name: "related", Identity: "a", Space: space,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	type reconcile struct {
		Key     string
		Deleted bool
	}
	var mu sync.Mutex
	var got []reconcile
	var reported []error
	loop, err := shard.NewLoop(runManager(t), s, configMapSource(cluster), typed.ReconcilerFunc[*corev1.ConfigMap](
		func(_ context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			mu.Lock()
			got = append(got, reconcile{req.Key, req.Deleted})
			mu.Unlock()
			return typed.Result{}, nil
		}), typed.Options{OnError: func(_ context.Context, key string, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	shard.Related(loop, secretSource(cluster), func(s *corev1.Secret) []string {
		return []string{nsOf[1] + "/config"}
	})
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := loop.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, "the mapping reported, or reconciled in the wrong shard", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reported) > 0 || len(got) > 1
	})
	time.Sleep(200 * time.Millisecond) // room for a wrong reconcile to show
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]reconcile{{Key: nsOf[1] + "/config"}}, got); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
	for _, err := range reported {
		if !errors.Is(err, shard.ErrOtherShard) {
			t.Errorf("reported %v, want an error wrapping ErrOtherShard", err)
		}
	}
}
