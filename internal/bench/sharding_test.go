package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/internal/testsupport/shardreplica"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/shard"
)

const (
	// shardObjects is how many ConfigMaps the sharding benchmarks reconcile.
	shardObjects = 1_000
	// shardNamespace holds them and the replicas' Leases, and nothing else.
	shardNamespace = "bench-shards"
	// shardCount is the number of shards: with 64 rather than the end-to-end test's 32,
	// Assign's cap of ceil(S/N)+1 shards per replica leaves 4 replicas within 17/16 of an
	// even share.
	shardCount = 64
	// shardWorkers bounds the reconciles running at once on each replica.
	shardWorkers = 4
	// shardWork is what one reconcile takes: a sleep, so that replicas sharing this
	// machine's cores still work in parallel as replicas on their own nodes would.
	shardWork = 5 * time.Millisecond
	// The replicas' lease timings: short, so that the shards settle quickly.
	shardLease, shardRenew, shardRetry = 4 * time.Second, 3 * time.Second, 500 * time.Millisecond
	// shardWriters is how many goroutines write the ConfigMaps of a round.
	shardWriters = 32
	// shardQuiet is how long no reconcile may start before a round: the replicas' initial
	// reconciles are over.
	shardQuiet = time.Second
)

var (
	// shardGroups numbers the replica groups, one per run, so that no run sees the Leases
	// of another (a crashed replica's stay behind).
	shardGroups atomic.Int64
	// shardRounds numbers the rounds of writes across runs: a ConfigMap's data["round"]
	// is the last round that wrote it.
	shardRounds atomic.Int64
)

// shardSetup is the sharding benchmarks' namespace, created once per test binary run.
var shardSetup struct {
	once sync.Once
	err  error
	// names are the ConfigMaps' names, and shardOf maps each to its shard.
	names   []string
	shardOf map[string]int
	// serverFiltered says whether the API server applied a shard selector.
	serverFiltered bool
}

// shardControlPlane starts the shared control plane if need be, creates the sharding
// benchmarks' ConfigMaps on first use, and returns a configuration with a high client
// rate limit (QPS 1000, burst 2000).
func shardControlPlane(b *testing.B) *rest.Config {
	b.Helper()
	cfg := startControlPlane(b)
	shardSetup.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		if shardSetup.err = createConfigMaps(ctx, cfg, shardNamespace, shardObjects); shardSetup.err != nil {
			return
		}
		shardSetup.err = readShards(ctx, cfg)
		b.Logf("%d ConfigMaps created in %v; server-side shard filter: %v", shardObjects,
			time.Since(start).Round(time.Millisecond), shardSetup.serverFiltered)
	})
	if shardSetup.err != nil {
		b.Fatal(shardSetup.err)
	}
	return cfg
}

// readShards lists the ConfigMaps to map each to its shard, and asks the server for one
// shard to learn whether it filters (it echoes the selector in ListMeta.ShardInfo).
func readShards(ctx context.Context, cfg *rest.Config) error {
	cfg, closeAll := ownConnections(cfg)
	defer closeAll()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cms := client.CoreV1().ConfigMaps(shardNamespace)
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	space := shard.Space{Shards: shardCount}
	shardSetup.shardOf = map[string]int{}
	for i := range list.Items {
		cm := &list.Items[i]
		shardSetup.names = append(shardSetup.names, cm.Name)
		shardSetup.shardOf[cm.Name] = space.Of(cm)
	}
	slices.Sort(shardSetup.names)
	sel := space.Selector([]int{0})
	one, err := cms.List(ctx, metav1.ListOptions{ShardSelector: sel})
	if err != nil {
		return err
	}
	shardSetup.serverFiltered = one.ShardInfo != nil && one.ShardInfo.Selector == sel
	return nil
}

// shardTracker is the replicas' reconciler: it sleeps shardWork, then records which
// replica reconciled which key at which round. A round is awaited with expect.
type shardTracker struct {
	space shard.Space

	mu    sync.Mutex
	gate  chan struct{} // reconciles wait for it to close, when not nil
	seen  map[string]int
	last  time.Time // when the last reconcile started
	round int       // the round awaited
	keys  map[string]bool
	left  int
	done  chan struct{}
	// per round: reconciles by replica, and when each awaited key was first reconciled
	// at the round (the reconcile's start) and by which replica
	byReplica map[string]int
	at        map[string]time.Time
	by        map[string]string
	// per round: the reconciles' total time, and when each replica's last one ended
	busy    time.Duration
	counted int
	ended   map[string]time.Time
	// first is when each shard's first reconcile by replica firstBy started, since mark.
	firstBy string
	first   map[int]time.Time
}

func newShardTracker() *shardTracker {
	return &shardTracker{space: shard.Space{Shards: shardCount}, seen: map[string]int{}, done: make(chan struct{})}
}

func (t *shardTracker) reconcile(ctx context.Context, replica string, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
	t.mu.Lock()
	gate := t.gate
	t.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return typed.Result{}, nil
		}
	}
	start := time.Now()
	t.mu.Lock()
	t.last = start
	if t.firstBy == replica && req.Object != nil {
		if i := t.space.Of(req.Object); t.first != nil && t.first[i].IsZero() {
			t.first[i] = start
		}
	}
	t.mu.Unlock()
	time.Sleep(shardWork)
	end := time.Now()
	if req.Object == nil {
		return typed.Result{}, nil
	}
	round, _ := strconv.Atoi(req.Object.Data["round"])
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byReplica != nil {
		t.byReplica[replica]++
		t.busy += end.Sub(start)
		t.counted++
		t.ended[replica] = end
	}
	prior, ok := t.seen[req.Key]
	if ok && prior >= t.round {
		return typed.Result{}, nil
	}
	t.seen[req.Key] = max(prior, round)
	if round >= t.round && (t.keys == nil || t.keys[req.Key]) {
		if t.at != nil {
			t.at[req.Key], t.by[req.Key] = start, replica
		}
		if t.left--; t.left == 0 {
			close(t.done)
		}
	}
	return typed.Result{}, nil
}

// expect starts awaiting round for keys (every ConfigMap if nil): the channel returned
// closes once each has been reconciled with data["round"] >= round. With gated, the
// reconciles wait until open is called.
func (t *shardTracker) expect(round int, keys []string, gated bool) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.round, t.keys, t.done = round, nil, make(chan struct{})
	if keys != nil {
		t.keys = map[string]bool{}
		for _, k := range keys {
			t.keys[k] = true
		}
	}
	t.left = len(keys)
	if keys == nil {
		t.left = len(shardSetup.names)
	}
	t.byReplica, t.at, t.by = map[string]int{}, map[string]time.Time{}, map[string]string{}
	t.busy, t.counted, t.ended = 0, 0, map[string]time.Time{}
	if gated {
		t.gate = make(chan struct{})
	}
	return t.done
}

// open lets the reconciles waiting for the gate through.
func (t *shardTracker) open() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gate != nil {
		close(t.gate)
		t.gate = nil
	}
}

// mark starts recording the first reconcile of each shard by replica.
func (t *shardTracker) mark(replica string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.firstBy, t.first = replica, map[int]time.Time{}
}

// quiet reports whether every ConfigMap has been reconciled and none for d.
func (t *shardTracker) quiet(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.seen) == len(shardSetup.names) && time.Since(t.last) >= d
}

// benchReplica is a replica whose logs can be silenced: the errors of a replica cut off
// on purpose are expected.
type benchReplica struct {
	*shardreplica.Replica
	quiet *atomic.Bool
}

// crash cuts the replica off, and silences it.
func (r benchReplica) crash() {
	r.quiet.Store(true)
	r.Crash()
}

// startReplicas starts n replicas of a new group, named r0, r1, ..., and returns them
// with a function that stops them all.
func startReplicas(b *testing.B, cfg *rest.Config, n int, t *shardTracker) ([]benchReplica, func()) {
	b.Helper()
	rc := shardreplica.Config{
		Rest: cfg, Namespace: shardNamespace, Group: fmt.Sprintf("bench-%d", shardGroups.Add(1)),
		Space: shard.Space{Shards: shardCount}, LeaseDuration: shardLease, RenewDeadline: shardRenew,
		RetryPeriod: shardRetry, Workers: shardWorkers, Reconcile: t.reconcile,
	}
	var reps []benchReplica
	stop := func() {
		for _, r := range reps {
			if err := r.Stop(); err != nil {
				b.Errorf("replica %s: %v", r.Name, err)
			}
		}
	}
	for i := range n {
		quiet := new(atomic.Bool)
		ctx := klog.NewContext(context.Background(), logr.New(silenceable{LogSink: klog.Background().GetSink(), quiet: quiet}))
		r, err := shardreplica.Start(ctx, rc, fmt.Sprintf("r%d", i))
		if err != nil {
			stop()
			b.Fatal(err)
		}
		reps = append(reps, benchReplica{Replica: r, quiet: quiet})
	}
	return reps, stop
}

// silenceable passes log entries on to its LogSink until quiet is set.
type silenceable struct {
	logr.LogSink
	quiet *atomic.Bool
}

func (s silenceable) Enabled(level int) bool { return !s.quiet.Load() && s.LogSink.Enabled(level) }

func (s silenceable) Info(level int, msg string, kv ...any) {
	if !s.quiet.Load() {
		s.LogSink.Info(level, msg, kv...)
	}
}

func (s silenceable) Error(err error, msg string, kv ...any) {
	if !s.quiet.Load() {
		s.LogSink.Error(err, msg, kv...)
	}
}

func (s silenceable) WithValues(kv ...any) logr.LogSink {
	return silenceable{LogSink: s.LogSink.WithValues(kv...), quiet: s.quiet}
}

func (s silenceable) WithName(name string) logr.LogSink {
	return silenceable{LogSink: s.LogSink.WithName(name), quiet: s.quiet}
}

// settle waits until every replica sees all of reps as members and holds exactly the
// shards Assign gives it, and then until every ConfigMap has been reconciled and no
// reconcile has started for shardQuiet. It returns how long that took.
func settle(b *testing.B, reps []benchReplica, t *shardTracker) time.Duration {
	b.Helper()
	start := time.Now()
	var names []string
	for _, r := range reps {
		names = append(names, r.Name)
	}
	want := shard.Assign(shardCount, names)
	deadline := start.Add(time.Minute)
	for {
		ok := true
		for _, r := range reps {
			var mine []int
			for i, owner := range want {
				if owner == r.Name {
					mine = append(mine, i)
				}
			}
			if !slices.Equal(r.Sharder.Members(), names) || !slices.Equal(r.Sharder.Held(), mine) {
				ok = false
			}
		}
		if ok && t.quiet(shardQuiet) {
			return time.Since(start) - shardQuiet
		}
		if time.Now().After(deadline) {
			for _, r := range reps {
				b.Logf("replica %s: members %v, held %v", r.Name, r.Sharder.Members(), r.Sharder.Held())
			}
			b.Fatalf("the shards did not settle within a minute (quiet: %v)", t.quiet(shardQuiet))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeRound sets data["round"] of the ConfigMaps names to round, by merge patch,
// shardWriters at a time, and returns how long that took.
func writeRound(b *testing.B, client kubernetes.Interface, names []string, round int) time.Duration {
	b.Helper()
	start := time.Now()
	cms := client.CoreV1().ConfigMaps(shardNamespace)
	patch := []byte(fmt.Sprintf(`{"data":{"round":%q}}`, strconv.Itoa(round)))
	next := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range min(shardWriters, len(names)) {
		wg.Go(func() {
			for name := range next {
				if _, err := cms.Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for _, name := range names {
		next <- name
	}
	close(next)
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatalf("writing round %d: %v", round, *err)
	}
	return time.Since(start)
}

// waitDelivered waits until the cache of the replica holding each ConfigMap has its
// data of round, and returns how long that took.
func waitDelivered(b *testing.B, reps []benchReplica, round int) time.Duration {
	b.Helper()
	start := time.Now()
	want := strconv.Itoa(round)
	left := slices.Clone(shardSetup.names)
	for deadline := start.Add(time.Minute); ; {
		left = slices.DeleteFunc(left, func(name string) bool {
			for _, r := range reps {
				if cm, ok := r.Loop.Get(shardNamespace + "/" + name); ok && cm.Data["round"] == want {
					return true
				}
			}
			return false
		})
		if len(left) == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			b.Fatalf("round %d: %d ConfigMaps not in the replicas' caches after a minute", round, len(left))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitRound waits for done, failing b after timeout.
func waitRound(b *testing.B, t *shardTracker, done <-chan struct{}, timeout time.Duration, what string) {
	b.Helper()
	select {
	case <-done:
	case <-time.After(timeout):
		t.mu.Lock()
		left := t.left
		t.mu.Unlock()
		b.Fatalf("%s: %d keys not reconciled after %v", what, left, timeout)
	}
}

// benchShardedReconcile runs n replicas, waits for their shards to settle, and then
// times rounds of changes to every ConfigMap until each has been reconciled with its
// new data. Each op is two rounds:
//
//   - backlog: the reconciles wait at a gate while every ConfigMap is written and until
//     every change is in the replicas' caches; the time runs from opening the gate to the
//     last key reconciled. keys/s is the replicas' reconcile capacity, whatever the
//     speed of the writer, the API server and the watches.
//   - stream: no gate; the time runs from the first write to the last key reconciled.
//     stream-keys/s includes the writer (write-ms), the API server and the watches.
//
// From the backlog round it also reports what explains keys/s: the busiest replica's
// shards and reconciles (max-shards, max-keys) and when it finished (busiest-ms, from
// the gate's opening), the mean wall time of a reconcile (reconcile-ms: the 5 ms sleep
// and how late the sleeper was woken, a measure of CPU contention), the share of the
// worker time that reconciled (worker-busy), the process's CPU use over both cores
// (cpu-share: the replicas; etcd and kube-apiserver are other processes), and how long
// the changes took to reach the caches after the last write (deliver-ms). settle-s is
// how long the shards took to settle; server-filtered is 1 if the API server applied
// the shard selectors, 0 if the caches filtered on the client (each then receiving every
// ConfigMap).
func benchShardedReconcile(b *testing.B, cfg *rest.Config, n int) {
	b.StopTimer()
	cfg, closeAll := ownConnections(cfg)
	defer checkLeaks(b, closeAll)()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	t := newShardTracker()
	reps, stop := startReplicas(b, cfg, n, t)
	defer stop()
	settled := settle(b, reps, t)

	var backlog, stream, write, deliver, busy, busiest, cpu time.Duration
	busiestKeys, busiestShards, reconciles := 0, 0, 0
	b.StartTimer()
	for range b.N {
		round := int(shardRounds.Add(1))
		done := t.expect(round, nil, true)
		writeRound(b, client, shardSetup.names, round)
		deliver += waitDelivered(b, reps, round)
		cpu0, _ := processCPU()
		start := time.Now()
		t.open()
		waitRound(b, t, done, time.Minute, fmt.Sprintf("backlog round %d", round))
		backlog += time.Since(start)
		cpu1, _ := processCPU()
		cpu += cpu1 - cpu0
		t.mu.Lock()
		for r, k := range t.byReplica {
			if k > busiestKeys {
				busiestKeys, busiest = k, t.ended[r].Sub(start)
			}
		}
		busy += t.busy
		reconciles += t.counted
		t.mu.Unlock()

		round = int(shardRounds.Add(1))
		done = t.expect(round, nil, false)
		start = time.Now()
		write += writeRound(b, client, shardSetup.names, round)
		waitRound(b, t, done, time.Minute, fmt.Sprintf("stream round %d", round))
		stream += time.Since(start)
	}
	b.StopTimer()
	for _, r := range reps {
		busiestShards = max(busiestShards, len(r.Sharder.Held()))
	}
	keys := float64(b.N * shardObjects)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
	b.ReportMetric(keys/backlog.Seconds(), "keys/s")
	b.ReportMetric(keys/stream.Seconds(), "stream-keys/s")
	b.ReportMetric(ms(write), "write-ms")
	b.ReportMetric(ms(deliver), "deliver-ms")
	b.ReportMetric(float64(busiestShards), "max-shards")
	b.ReportMetric(float64(busiestKeys), "max-keys")
	b.ReportMetric(float64(busiest)/float64(time.Millisecond), "busiest-ms")
	b.ReportMetric(float64(busy)/float64(time.Millisecond)/float64(reconciles), "reconcile-ms")
	b.ReportMetric(float64(busy)/(float64(backlog)*float64(n*shardWorkers)), "worker-busy")
	b.ReportMetric(float64(cpu)/(2*float64(backlog)), "cpu-share")
	b.ReportMetric(settled.Seconds(), "settle-s")
	filtered := 0.0
	if shardSetup.serverFiltered {
		filtered = 1
	}
	b.ReportMetric(filtered, "server-filtered")
}

// benchShardHandOver runs two replicas, waits for their shards to settle, takes one
// away (leave: "crash" cuts it off, its Leases left to expire; "stop" stops it, which
// releases them), and right away changes one ConfigMap of each shard it held: the
// shard's last in list order, which its new owner's initial reconciles of the shard
// reach last. It reports, from the moment the replica went, the median and the longest
// time until the survivor reconciled each change (handover-*-s) and until its first
// reconcile of each moved shard, whichever key (first-*-s: the Sharder's hand-over),
// with the lease duration (lease-s) and the shards moved.
func benchShardHandOver(b *testing.B, cfg *rest.Config, leave string) {
	b.StopTimer()
	cfg, closeAll := ownConnections(cfg)
	defer checkLeaks(b, closeAll)()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var handOver, first []time.Duration
	moved := 0
	for range b.N {
		t := newShardTracker()
		reps, stop := startReplicas(b, cfg, 2, t)
		settle(b, reps, t)
		gone, survivor := reps[0], reps[1]
		var keys []string
		shards := gone.Sharder.Held()
		for _, i := range shards {
			last := "" // the shard's last in list order: its new owner reconciles the others first
			for _, name := range shardSetup.names {
				if shardSetup.shardOf[name] == i {
					last = name
				}
			}
			if last != "" {
				keys = append(keys, shardNamespace+"/"+last)
			}
		}
		var names []string
		for _, k := range keys {
			names = append(names, k[len(shardNamespace)+1:])
		}
		round := int(shardRounds.Add(1))
		done := t.expect(round, keys, false)
		t.mark(survivor.Name)
		b.StartTimer()
		start := time.Now()
		stopped := make(chan error, 1)
		switch leave {
		case "crash":
			gone.crash()
		case "stop":
			go func() { stopped <- gone.Stop() }()
		}
		writeRound(b, client, names, round)
		waitRound(b, t, done, 3*shardLease+30*time.Second, "hand-over of "+fmt.Sprint(len(keys))+" shards")
		b.StopTimer()
		t.mu.Lock()
		for _, k := range keys {
			if t.by[k] != survivor.Name {
				b.Errorf("key %s reconciled by %s, not the survivor", k, t.by[k])
			}
			handOver = append(handOver, t.at[k].Sub(start))
		}
		for _, i := range shards {
			if at, ok := t.first[i]; ok {
				first = append(first, at.Sub(start))
			}
		}
		t.mu.Unlock()
		moved += len(shards)
		if leave == "stop" {
			if err := <-stopped; err != nil {
				b.Error(err)
			}
		}
		stop() // stopping a stopped replica again only returns its error again
	}
	slices.Sort(handOver)
	slices.Sort(first)
	b.ReportMetric(shardLease.Seconds(), "lease-s")
	b.ReportMetric(float64(moved)/float64(b.N), "moved-shards")
	b.ReportMetric(median(handOver).Seconds(), "handover-median-s")
	b.ReportMetric(handOver[len(handOver)-1].Seconds(), "handover-max-s")
	if len(first) > 0 {
		b.ReportMetric(median(first).Seconds(), "first-median-s")
		b.ReportMetric(first[len(first)-1].Seconds(), "first-max-s")
	}
}

// median returns the median of sorted ds.
func median[V time.Duration | float64](ds []V) V {
	if len(ds)%2 == 1 {
		return ds[len(ds)/2]
	}
	return (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
}
