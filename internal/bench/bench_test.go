package bench

// The benchmarks, in the order in which they run and BENCHMARKS.md reports them. Each
// runs typedinformer first, then client-go's SharedIndexInformer (lib=client-go), then
// client-go's TypedSharedIndexInformer[*corev1.ConfigMap] (lib=client-go-typed), on the
// same Dataset; the helpers are in the file of each scenario. The sharding benchmarks,
// last, run typedinformer alone (client-go has no sharding) against itself with one
// replica.

import (
	"fmt"
	"testing"
)

// BenchmarkSteadyState streams modifications of already cached objects through the watch
// to one handler that does almost nothing, with 1,000 and 100,000 objects in the cache.
// The modifications visit the keys round robin. Each size runs with two inputs (see
// Dataset): input=fresh allocates each event's object as it is pushed, every string and
// map new, as a decoded watch event is; input=prebuilt pushes objects built before the
// timed part and kept alive by the benchmark, which leaves out the input's allocations
// and the garbage of replaced objects: the libraries' own cost, a lower bound.
//
// One op is one batch of steadyBatch events, timed from the first push until the handler
// has seen the last state of every modified key (a library may merge modifications of a
// key that is still pending; client-go delivers every one). Per-event figures are
// reported as events/s, ns/event, B/event and allocs/event, and handled/event says which
// share of the events reached the handler as separate calls. lib=watch-alone is the
// ceiling: the input alone, read by a goroutine that does nothing else (its B/event and
// allocs/event are the input's own, which the libraries' figures include).
func BenchmarkSteadyState(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			for _, in := range steadyInputs {
				b.Run("input="+in.name, func(b *testing.B) {
					d := in.dataset(n, steadyBatch)
					for _, lib := range libraries {
						b.Run("lib="+lib.name, func(b *testing.B) { benchSteadyState(b, lib, d) })
					}
					b.Run("lib="+watchAlone, func(b *testing.B) { benchWatchAlone(b, d) })
				})
			}
		})
	}
}

// steadyInputs are the two kinds of stream BenchmarkSteadyState runs, in order.
var steadyInputs = []struct {
	name    string
	dataset func(keys, events int) *Dataset
}{
	{name: "fresh", dataset: NewFreshDataset},
	{name: "prebuilt", dataset: NewDataset},
}

// BenchmarkInitialSync measures a cold start: from creating and starting the library
// until its one handler has received an addition for every listed object and the
// library and the handler's registration report synced, with 10,000 and 100,000 objects.
//
// One op is one full sync of a new controller or informer; stopping it is not timed.
// ns/object, B/object and allocs/object divide the op's figures by the number of objects.
func BenchmarkInitialSync(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			d := NewDataset(n, 0)
			for _, lib := range libraries {
				b.Run("lib="+lib.name, func(b *testing.B) {
					defer checkLeaks(b, nil)()
					benchSync(b, lib, func() configMapLW { return NewSource(d.List) }, n)
				})
			}
		})
	}
}

// BenchmarkStalledHandler blocks the one handler on its first modification, then streams
// 100,000 and 1,000,000 modifications over 10,000 keys through the watch, and reports
// how much the heap grew: heap-MB is runtime.MemStats.HeapInuse after the stream (and two
// garbage collections) minus the same figure taken after the initial sync. A library
// whose handler backlog is bounded by keys stays flat from 100,000 to 1,000,000 events;
// one that queues every event grows with them.
//
// One op is one stream. The timed part is the push of every event until the cache holds
// the last state of every key, which is when every event has reached the handler's
// backlog; ns/event is reported too. The handler is released and the library stopped
// after each op, untimed.
func BenchmarkStalledHandler(b *testing.B) {
	b.Run(fmt.Sprintf("keys=%d", stalledKeys), func(b *testing.B) {
		for _, events := range []int{100_000, 1_000_000} {
			b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
				d := NewDataset(stalledKeys, events)
				for _, lib := range libraries {
					b.Run("lib="+lib.name, func(b *testing.B) { benchStalled(b, lib, d) })
				}
			})
		}
	})
}

// BenchmarkReads reads the cache of 10,000 ConfigMaps in 10 namespaces while
// modifications stream in at writeRate: Get by key (typedinformer's Store().Get, client-go's
// indexer GetByKey plus the type assertion every caller needs), List of every object
// (Store().List, indexer List) and the objects of one namespace through the namespace
// index (Store().ByIndex(eventcache.NamespaceIndex), indexer ByIndex(cache.NamespaceIndex)).
// client-go's typed informer reads through GetTypedIndexer: ByTypedIndex for the
// namespace; its TypedIndexer has no typed Get or List, so get is GetByKey plus the
// assertion as above, and list converts the untyped List to []*corev1.ConfigMap.
//
// One op is a batch of reads of one kind; ns/read, B/read and allocs/read divide by the
// batch. The allocation figures also count the write pipeline's allocations during the
// reads, which are small next to the reads' own except for get, which allocates nothing
// itself. writes/s is the write rate achieved meanwhile.
func BenchmarkReads(b *testing.B) {
	b.Run(fmt.Sprintf("objects=%d", readKeys), func(b *testing.B) {
		d := NewDataset(readKeys, 2*readKeys)
		for _, op := range readOps {
			b.Run("op="+op.name, func(b *testing.B) {
				for _, lib := range libraries {
					b.Run("lib="+lib.name, func(b *testing.B) { benchReads(b, lib, d, op) })
				}
			})
		}
	})
}

// BenchmarkControlPlaneSync measures the time each library takes to sync 10,000
// ConfigMaps from a real kube-apiserver (and etcd) on this machine, through a generated
// typed client (clientset.CoreV1().ConfigMaps(ns)): from starting the controller or
// informer until its one handler has received every addition and it reports synced.
// Decoding the list dominates, and is the same client-go code on both sides.
//
// The control plane is started, and the ConfigMaps created, once per test binary run.
// The benchmark is skipped when the etcd and kube-apiserver binaries have not been built
// (`make controlplane`, which `make bench` runs first).
func BenchmarkControlPlaneSync(b *testing.B) {
	cfg := sharedControlPlane(b)
	b.Run(fmt.Sprintf("objects=%d", controlPlaneObjects), func(b *testing.B) {
		for _, lib := range libraries {
			b.Run("lib="+lib.name, func(b *testing.B) { benchControlPlaneSync(b, lib, cfg) })
		}
	})
}

// BenchmarkShardedReconcile measures how reconcile throughput scales with replicas of a
// sharded loop (typed/shard) on the real control plane: 1, 2 and 4 replicas in this
// process, each on connections of its own (internal/testsupport/shardreplica), dividing 64 shards
// of 1,000 ConfigMaps, with 4 workers per replica and a reconciler that sleeps 5 ms per
// key. It sleeps rather than spins: the replicas share this machine's cores, where on a
// cluster each would have its own. The API server filters each shard's watch
// (ShardedListAndWatch), so each cache holds its shard's objects only.
//
// Each run waits for the shards to settle (each replica holds what Assign gives it and
// every ConfigMap has been reconciled), then times rounds of changes to every ConfigMap
// until each key has been reconciled with its new data; see benchShardedReconcile. It
// is typedinformer alone: client-go has no sharding.
func BenchmarkShardedReconcile(b *testing.B) {
	cfg := shardControlPlane(b)
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) { benchShardedReconcile(b, cfg, n) })
	}
}

// BenchmarkShardHandOver measures how long the shards of a replica that goes away take
// to reach the other of two replicas, with 4 s leases: leave=crash cuts the replica off
// (its Leases expire), leave=stop stops it (it releases them). One op is one departure;
// see benchShardHandOver.
func BenchmarkShardHandOver(b *testing.B) {
	cfg := shardControlPlane(b)
	for _, leave := range []string{"crash", "stop"} {
		b.Run("leave="+leave, func(b *testing.B) { benchShardHandOver(b, cfg, leave) })
	}
}
