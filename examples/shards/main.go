// Command shards is the sharding demo, run by `make demo-shards`: replicas of a loop
// over ConfigMaps dividing the keys through typed/shard.
//
// Against the cluster in $KUBECONFIG or, when that is unset, a local etcd and
// kube-apiserver (with the ShardedListAndWatch feature gate on) that it starts and stops
// itself, it creates a namespace with 1,000 ConfigMaps and starts 3 replicas of a sharded
// loop over them (32 shards, Leases of 5 s), each in this process with connections of its
// own (internal/testsupport/shardreplica), while a writer changes 50 ConfigMaps a second throughout.
// Once they have settled it kills one (its connections are cut: it releases nothing, as
// if its pod died), waits until the two others hold every shard, adds a fourth, and waits
// until the shards have settled again. One line a second shows who holds what. The
// summary gives the hand-over times the replicas reported through shard.Metrics, the
// shards moved, and checks that no key was ever reconciled by two replicas at once and
// that every change was reconciled.
//
// Exit status: 0 on success, 1 on an error, an overlap or a change never reconciled, 130
// when interrupted. In every case it stops what it started and, on a real cluster,
// deletes its namespace.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/internal/demo/democluster"
	"github.com/typedinformer/typedinformer/internal/testsupport/shardreplica"
	"github.com/typedinformer/typedinformer/typed/shard"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// The demo's sharding: short Leases, so that a killed replica's shards move within
// seconds.
const (
	shards        = 32
	group         = "shards-demo"
	leaseDuration = 5 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = time.Second
	workers       = 4
	reconcileTime = 2 * time.Millisecond
	// settleFor is how long the 3 replicas run before one is killed.
	settleFor = 10 * time.Second
	// stepTimeout bounds each wait for the shards to settle.
	stepTimeout = 30 * time.Second
)

var space = shard.Space{Shards: shards, By: shard.ByUID}

type settings struct {
	objects int
	churn   int
}

func main() {
	os.Exit(run())
}

func run() int {
	var s settings
	klog.InitFlags(nil) // -v=1 shows the library's logs; by default only its errors
	flag.IntVar(&s.objects, "objects", 1000, "ConfigMaps the replicas divide")
	flag.IntVar(&s.churn, "churn", 50, "ConfigMaps changed per second, throughout")
	flag.Parse()
	if s.objects < 1 || s.churn < 1 || s.churn > 1000 {
		fmt.Fprintln(os.Stderr, "demo-shards: -objects must be at least 1 and -churn between 1 and 1000")
		return 2
	}

	wallStart := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal a second Ctrl-C kills the demo at once if the clean-up hangs.
	context.AfterFunc(ctx, stop)

	err := demo(ctx, s)
	fmt.Printf("wall time %s\n", time.Since(wallStart).Round(10*time.Millisecond))
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "demo-shards: interrupted; everything it started has been stopped")
		return 130
	default:
		fmt.Fprintln(os.Stderr, "demo-shards:", err)
		return 1
	}
}

// demo runs the whole show; its deferred calls undo what it set up, in reverse order.
func demo(ctx context.Context, s settings) (err error) {
	cl, err := democluster.Connect(ctx, testenv.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cl.Close()) }()
	config := rest.CopyConfig(cl.Config)
	if cl.Local {
		config.QPS, config.Burst = 2000, 4000 // each replica has its own clients, and limiter
	} else {
		config.QPS, config.Burst = max(config.QPS, 200), max(config.Burst, 400)
	}
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("creating the clientset: %w", err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "typedinformer-shards-",
		Labels:       map[string]string{"app.kubernetes.io/managed-by": "typedinformer-demo"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the namespace: %w", err)
	}
	if !cl.Local {
		// A local control plane is thrown away whole; on a real cluster the namespace must go.
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if derr := cs.CoreV1().Namespaces().Delete(dctx, ns.Name, metav1.DeleteOptions{}); derr != nil {
				err = errors.Join(err, fmt.Errorf("deleting namespace %s: %w", ns.Name, derr))
				return
			}
			fmt.Printf("deleted namespace %s\n", ns.Name)
		}()
	}
	filters, err := serverFilters(ctx, cs, ns.Name)
	if err != nil {
		return err
	}

	created := time.Now()
	keys, perShard, err := createObjects(ctx, cs, ns.Name, s.objects)
	if err != nil {
		return err
	}
	listBytes, err := listSize(ctx, config, ns.Name)
	if err != nil {
		return err
	}
	fmt.Printf("namespace %s: %d ConfigMaps created in %s; a List of them all is %d KB\n",
		ns.Name, s.objects, time.Since(created).Round(10*time.Millisecond), listBytes/1024)
	if filters {
		fmt.Println("the API server filters by shard (ShardedListAndWatch): each replica receives its shards' objects only")
	} else {
		fmt.Println("the API server ignores shard selectors (ShardedListAndWatch is off): every watch receives every object and")
		fmt.Println("the replicas filter on the client, so the KB column grows with the shards held, not with their objects")
	}
	fmt.Printf("%d shards by UID, Leases of %s renewed every %s, %d workers per replica, %s per reconcile, %d changes a second\n\n",
		shards, leaseDuration, retryPeriod, workers, reconcileTime, s.churn)

	sh := &show{s: s, ns: ns.Name, config: config, cs: cs, keys: keys, perShard: perShard, listBytes: listBytes, filters: filters,
		rec: newRecord(), replicas: map[string]*replica{}}
	sh.table = newTable([]string{"replica-1", "replica-2", "replica-3", "replica-4"}, sh.rec)
	defer func() { err = errors.Join(err, sh.stop()) }()
	if err := sh.run(ctx); err != nil {
		return err
	}
	if err := sh.stop(); err != nil {
		return err
	}
	return sh.summary(cl)
}

// serverFilters reports whether the API server applies shard selectors: a list with one
// is answered with ListMeta.ShardInfo only when it does.
func serverFilters(ctx context.Context, cs kubernetes.Interface, ns string) (bool, error) {
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{ShardSelector: space.Selector([]int{0}), Limit: 1})
	if err != nil {
		return false, fmt.Errorf("listing with a shard selector: %w", err)
	}
	return list.ShardInfo != nil, nil
}

// createObjects creates n ConfigMaps on 16 goroutines, and returns their keys and how
// many lie in each shard.
func createObjects(ctx context.Context, cs kubernetes.Interface, ns string, n int) ([]string, []int, error) {
	keys := make([]string, n)
	perShard := make([]int, shards)
	var mu sync.Mutex
	var errs []error
	next := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range next {
				cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(i, 0), metav1.CreateOptions{})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					keys[i] = ns + "/" + cm.Name
					perShard[space.Of(cm)]++
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("creating %d of the ConfigMaps failed, first: %w", len(errs), errs[0])
	}
	return keys, perShard, nil
}

// listSize returns the bytes of a List of every ConfigMap in ns, received as a replica
// receives them: with the same clientset's encoding, counted above the transport.
func listSize(ctx context.Context, config *rest.Config, ns string) (int64, error) {
	var n atomic.Int64
	c := rest.CopyConfig(config)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				resp.Body = &countingBody{ReadCloser: resp.Body, n: &n}
			}
			return resp, err
		})
	})
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return 0, err
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
		return 0, fmt.Errorf("listing the ConfigMaps: %w", err)
	}
	return n.Load(), nil
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func configMap(i, v int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}, Data: map[string]string{"v": strconv.Itoa(v)}}
}

// show is the demo's state once the objects exist.
type show struct {
	s        settings
	ns       string
	config   *rest.Config
	cs       kubernetes.Interface
	keys     []string
	perShard []int
	// listBytes is the size of a List of every ConfigMap.
	listBytes int64
	// filters is whether the API server applies shard selectors.
	filters bool
	rec     *record
	table   *table

	replicas map[string]*replica
	order    []string

	stopChurn  context.CancelFunc
	churned    chan struct{}
	churnErr   error
	stopTable  chan struct{}
	tableDone  chan struct{}
	stopped    bool
	ended      time.Time // when stop began
	kill, join step
	bytes      map[string]int64 // received by each replica when the 3 first settled
}

// step is when the kill or the join happened, and when the shards settled after it.
type step struct{ at, settled time.Time }

// replica is a running replica and its logger's state: a killed replica's errors (it
// can renew nothing) are expected, and counted rather than printed.
type replica struct {
	*shardreplica.Replica
	killed atomic.Bool
	errors atomic.Int64
}

// run is the script: 3 replicas settle, one is killed, one is added.
func (sh *show) run(ctx context.Context) error {
	sh.table.header()
	sh.table.start = time.Now()
	sh.stopTable, sh.tableDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sh.tableDone)
		sh.table.run(sh.stopTable)
	}()
	for _, name := range []string{"replica-1", "replica-2", "replica-3"} {
		if err := sh.start(ctx, name); err != nil {
			return err
		}
	}
	sh.table.event("started replica-1, replica-2, replica-3")
	sh.startChurn(ctx)

	if err := sh.settle(ctx, "replica-1", "replica-2", "replica-3"); err != nil {
		return err
	}
	if err := waitFor(ctx, stepTimeout, func() bool { return sh.rec.log.ReconciledAtLeast(sh.keys, -1) }); err != nil {
		return fmt.Errorf("waiting for every key to be reconciled: %w", err)
	}
	sh.table.event("every key reconciled")
	sh.bytes = map[string]int64{}
	for name, r := range sh.replicas {
		sh.bytes[name] = r.BytesReceived()
	}
	if err := sleep(ctx, time.Until(sh.table.start.Add(settleFor))); err != nil {
		return err
	}

	sh.kill.at = time.Now()
	sh.replicas["replica-2"].killed.Store(true)
	sh.replicas["replica-2"].Crash()
	sh.table.event("killed replica-2 (connections cut: it releases nothing)")
	if err := sh.settle(ctx, "replica-1", "replica-3"); err != nil {
		return err
	}
	sh.kill.settled = time.Now()
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}

	sh.join.at = time.Now()
	if err := sh.start(ctx, "replica-4"); err != nil {
		return err
	}
	sh.table.event("added replica-4")
	if err := sh.settle(ctx, "replica-1", "replica-3", "replica-4"); err != nil {
		return err
	}
	sh.join.settled = time.Now()
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}

	sh.stopChurn()
	<-sh.churned
	if sh.churnErr != nil {
		return sh.churnErr
	}
	sh.table.event("changes stopped")
	// Every change is reconciled soon: wait for the last ones, bounded, and report any
	// missed in the summary.
	_ = waitFor(ctx, 10*time.Second, func() bool { missed, _ := sh.rec.unreconciled(); return len(missed) == 0 })
	return ctx.Err()
}

// start starts a replica named name.
func (sh *show) start(ctx context.Context, name string) error {
	r := &replica{}
	cfg := shardreplica.Config{
		Rest: sh.config, Namespace: sh.ns, Group: group, Space: space,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Workers: workers, Metrics: metrics{replica: name, r: sh.rec}, Reconcile: sh.rec.reconcile,
	}
	var err error
	r.Replica, err = shardreplica.Start(klog.NewContext(ctx, replicaLogger(name, r)), cfg, name)
	if err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	sh.replicas[name] = r
	sh.order = append(sh.order, name)
	sh.table.add(r.Replica)
	return nil
}

// replicaLogger is the logger of the library in a replica: klog's at -v=1 and above, and
// otherwise one that prints errors only, so that the table reads uninterrupted unless
// something goes wrong. A killed replica's errors are counted, not printed.
func replicaLogger(name string, r *replica) logr.Logger {
	if klog.V(1).Enabled() {
		return klog.Background().WithValues("replica", name)
	}
	return funcr.New(func(prefix, args string) {
		if strings.Contains(args, "Error initially creating lease lock") && strings.Contains(args, "already exists") {
			// client-go's leader election, when two replicas create a shard's Lease at
			// once: the loser campaigns on as it should.
			return
		}
		if r.killed.Load() {
			r.errors.Add(1)
			return
		}
		fmt.Fprintf(os.Stderr, "  ! %s %s %s\n", name, prefix, args)
	}, funcr.Options{Verbosity: -1})
}

// startChurn changes s.churn ConfigMaps a second, at random, until stopChurn.
func (sh *show) startChurn(ctx context.Context) {
	ctx, sh.stopChurn = context.WithCancel(ctx)
	sh.churned = make(chan struct{})
	versions := make([]int, len(sh.keys))
	go func() {
		defer close(sh.churned)
		rnd := rand.New(rand.NewPCG(1, 2))
		tick := time.NewTicker(time.Second / time.Duration(sh.s.churn))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			i := rnd.IntN(len(sh.keys))
			versions[i]++
			at := time.Now()
			if _, err := sh.cs.CoreV1().ConfigMaps(sh.ns).Update(ctx, configMap(i, versions[i]), metav1.UpdateOptions{}); err != nil {
				if ctx.Err() == nil {
					sh.churnErr = fmt.Errorf("changing a ConfigMap: %w", err)
				}
				return
			}
			sh.rec.log.Changed(shardreplica.Change{Key: sh.keys[i], Version: versions[i], At: at})
		}
	}()
}

// settle waits until the named replicas hold exactly the shards that shard.Assign gives
// them, the others none, and each replica's caches hold exactly its shards' objects.
func (sh *show) settle(ctx context.Context, names ...string) error {
	owners := shard.Assign(shards, names)
	err := waitFor(ctx, stepTimeout, func() bool {
		for name, r := range sh.replicas {
			var want []int
			for i, o := range owners {
				if o == name {
					want = append(want, i)
				}
			}
			if !slices.Equal(r.Sharder.Held(), want) {
				return false
			}
			cached := r.Loop.Cached()
			if len(cached) != len(want) {
				return false
			}
			for _, i := range want {
				if cached[i] != sh.perShard[i] {
					return false
				}
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("waiting for %v to divide the shards: %w", names, err)
	}
	held := make([]string, 0, len(names))
	for _, n := range names {
		held = append(held, fmt.Sprintf("%s %d", n, len(sh.replicas[n].Sharder.Held())))
	}
	sh.table.event("settled: %s", strings.Join(held, ", "))
	return nil
}

// stop stops the churn, the table and every replica, at once.
func (sh *show) stop() error {
	if sh.stopped {
		return nil
	}
	sh.stopped = true
	sh.ended = time.Now()
	started := time.Now()
	defer func() {
		fmt.Printf("stopped the churn and the replicas in %s\n", time.Since(started).Round(time.Millisecond))
	}()
	if sh.stopChurn != nil {
		sh.stopChurn()
		<-sh.churned
	}
	if sh.stopTable != nil {
		close(sh.stopTable)
		<-sh.tableDone
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, r := range sh.replicas {
		wg.Go(func() {
			if err := r.Stop(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", r.Name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitFor polls cond every 100 ms until it holds, for at most timeout.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil })
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
