package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/internal/testsupport/watchtap"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/consistency"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
)

// watchLag is how late the lagging clients see watch events: a congested connection, or
// an API server whose watch cache lags etcd. Requests other than watches pass at once.
const watchLag = 2 * time.Second

// lagging returns cfg with every watch response's bytes delivered lag after the server
// sent them, as a proxy holding back streamed responses would; lists and writes are
// answered at once.
func lagging(cfg *rest.Config, lag time.Duration) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || req.URL.Query().Get("watch") != "true" {
				return resp, err
			}
			resp.Body = newLaggingBody(resp.Body, lag)
			return resp, nil
		})
	})
	return cfg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// laggingBody hands out what its source sent, each piece lag after it arrived.
type laggingBody struct {
	src    io.ReadCloser
	pieces chan piece
	cur    []byte
	err    error
}

type piece struct {
	data []byte
	at   time.Time
	err  error
}

func newLaggingBody(src io.ReadCloser, lag time.Duration) *laggingBody {
	b := &laggingBody{src: src, pieces: make(chan piece, 4096)}
	go func() {
		defer close(b.pieces)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				b.pieces <- piece{data: buf[:n], at: time.Now().Add(lag)}
			}
			if err != nil {
				b.pieces <- piece{err: err, at: time.Now().Add(lag)}
				return
			}
		}
	}()
	return b
}

func (b *laggingBody) Read(p []byte) (int, error) {
	for len(b.cur) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		pc, ok := <-b.pieces
		if !ok {
			return 0, io.EOF
		}
		time.Sleep(time.Until(pc.at))
		b.cur, b.err = pc.data, pc.err
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

func (b *laggingBody) Close() error {
	err := b.src.Close()
	for range b.pieces { // the reader goroutine ends once the source is closed
	}
	return err
}

// rywOperator is the operator of the proof: a parent ConfigMap wants a child ConfigMap,
// created when the cache shows none, and a status (annotations) that counts the changes
// of its data["gen"] it has observed, written by a merge patch computed from the cache.
// It records its own writes with consistency.Wrote, as a reconciler writing through its
// own client does, and counts what a stale cache makes it do wrong.
type rywOperator struct {
	admin    clients
	ns       string
	parents  *controller.Controller[cm, cmList]
	children *controller.Controller[cm, cmList]

	reconciles      atomic.Int64
	staleReads      atomic.Int64 // a reconcile whose cached parent is older than its last write
	duplicateCreate atomic.Int64 // a child created again: AlreadyExists
	mu              sync.Mutex
	lastWrite       map[string]uint64 // per parent: the resourceVersion of the last write
	statusWrites    map[string]int    // per parent: the status writes made

	// Where a status write's wait goes: from the write's answer to its event reaching the
	// parents' reflector (the lag, and the server's and the proxy's share), then from there
	// to the key's next reconcile (the library's share).
	arrivals    *arrivals
	unmeasured  map[string][]statusWrite // per parent: its status writes, until measured
	toArrival   durations
	toReconcile durations
}

// statusWrite is a status write: its resourceVersion, and when its answer came.
type statusWrite struct {
	rv uint64
	at time.Time
}

// arrivals is a ListerWatcher that notes when each watch event reaches the reflector.
type arrivals struct {
	typedcorev1.ConfigMapInterface
	mu sync.Mutex
	at map[uint64]time.Time // by resourceVersion
}

func newArrivals(lw typedcorev1.ConfigMapInterface) *arrivals {
	return &arrivals{ConfigMapInterface: lw, at: map[uint64]time.Time{}}
}

func (a *arrivals) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := a.ConfigMapInterface.Watch(ctx, opts)
	if err != nil {
		return w, err
	}
	return watchtap.Tap(w, func(e watch.Event, _ <-chan struct{}) {
		if o, ok := e.Object.(cm); ok {
			if rv, err := strconv.ParseUint(o.ResourceVersion, 10, 64); err == nil {
				a.mu.Lock()
				a.at[rv] = time.Now()
				a.mu.Unlock()
			}
		}
	}), nil
}

// arrived reports when the event of resourceVersion rv reached the reflector.
func (a *arrivals) arrived(rv uint64) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.at[rv]
	return at, ok
}

const (
	countKey    = "ryw/count"
	observedKey = "ryw/observed"
)

func (o *rywOperator) reconcile(ctx context.Context, req typed.Request[cm]) (typed.Result, error) {
	if req.Deleted {
		return typed.Result{}, nil
	}
	started := time.Now()
	o.reconciles.Add(1)
	parent := req.Object
	rv, _ := strconv.ParseUint(parent.ResourceVersion, 10, 64)
	o.mu.Lock()
	if rv < o.lastWrite[req.Key] {
		o.staleReads.Add(1)
	}
	// The first reconcile after a status write's event reached the reflector.
	o.unmeasured[req.Key] = slices.DeleteFunc(o.unmeasured[req.Key], func(w statusWrite) bool {
		at, ok := o.arrivals.arrived(w.rv)
		if ok && at.Before(started) {
			o.toArrival.add(at.Sub(w.at))
			o.toReconcile.add(started.Sub(at))
		}
		return ok && at.Before(started)
	})
	o.mu.Unlock()

	cms := o.admin.kube.CoreV1().ConfigMaps(o.ns)
	if _, ok := o.children.Get(o.ns + "/child-" + parent.Name); !ok {
		child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child-" + parent.Name, Labels: map[string]string{"ryw": "child"},
			Annotations: map[string]string{"parent": parent.Name}}}
		created, err := cms.Create(ctx, child, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			o.duplicateCreate.Add(1)
		case err != nil:
			return typed.Result{}, err
		default:
			consistency.Wrote(ctx, created)
		}
	}
	if gen := parent.Data["gen"]; parent.Annotations[observedKey] != gen {
		count, _ := strconv.Atoi(parent.Annotations[countKey])
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, countKey, strconv.Itoa(count+1), observedKey, gen)
		written, err := cms.Patch(ctx, parent.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			return typed.Result{}, err
		}
		consistency.Wrote(ctx, written)
		wrote, _ := strconv.ParseUint(written.ResourceVersion, 10, 64)
		o.mu.Lock()
		o.lastWrite[req.Key] = max(o.lastWrite[req.Key], wrote)
		o.statusWrites[req.Key]++
		o.unmeasured[req.Key] = append(o.unmeasured[req.Key], statusWrite{rv: wrote, at: time.Now()})
		o.mu.Unlock()
	}
	return typed.Result{}, nil
}

// The proof of read-your-writes on a real API server: the operator's watches lag its
// writes by 2 s, and it is driven through at least 1,000 reconciles with changes
// throughout. With read-your-writes (the default) no reconcile reads a cache older than
// its key's last write, no child is created twice and no status increment is lost; with
// it off, the same run shows each of these, so the test is known to see them.
func TestReadYourWritesUnderAWatchThatLagsTheWrites(t *testing.T) {
	env, admin := setUp(t, "ryw-on", "ryw-off")
	slow := newClients(t, lagging(env.AdminConfig(), watchLag))
	for _, off := range []bool{false, true} {
		ns := map[bool]string{false: "ryw-on", true: "ryw-off"}[off]
		t.Run(ns, func(t *testing.T) {
			const parents = 50
			cms := admin.kube.CoreV1().ConfigMaps(ns)
			createParents(t, cms, parents)
			o := &rywOperator{admin: admin, ns: ns, lastWrite: map[string]uint64{}, statusWrites: map[string]int{},
				arrivals: newArrivals(slow.kube.CoreV1().ConfigMaps(ns)), unmeasured: map[string][]statusWrite{}}
			o.parents, o.children = testctl.New(t, o.arrivals, controller.Options[cm]{Options: selected("ryw=parent")}),
				testctl.New(t, slow.kube.CoreV1().ConfigMaps(ns), controller.Options[cm]{Options: selected("ryw=child")})
			waits := &waitRecorder{}
			loop, err := typed.NewLoop(o.parents, typed.ReconcilerFunc[cm](o.reconcile), typed.Options{Workers: 4, DisableReadYourWrites: off, Metrics: waits})
			if err != nil {
				t.Fatal(err)
			}
			if err := typed.Related(loop, o.children, func(c cm) []string { return []string{ns + "/" + c.Annotations["parent"]} }); err != nil {
				t.Fatal(err)
			}
			stop := start(t, runAll{o.parents.Run, o.children.Run, loop.Run})

			// Changes throughout: every parent's gen moves on, round after round, faster
			// than the watch shows it, until 1,000 reconciles have run.
			for gen := 1; o.reconciles.Load() < 1000; gen++ {
				if gen > 200 {
					t.Fatalf("only %d reconciles after 200 rounds of changes; waits %v, %d past the bound",
						o.reconciles.Load(), &waits.durations, waits.bounds.Load())
				}
				for i := range parents {
					patch := fmt.Sprintf(`{"data":{"gen":%q}}`, strconv.Itoa(gen))
					if _, err := cms.Patch(timeout(t), fmt.Sprintf("p%d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(watchLag / 4)
			}
			// Let the operator settle: every parent has observed its last gen.
			waitUntil(t, "every parent's status observes its last gen", func() (bool, string) {
				l, err := cms.List(timeout(t), metav1.ListOptions{LabelSelector: "ryw=parent"})
				if err != nil {
					return false, err.Error()
				}
				for _, p := range l.Items {
					if p.Annotations[observedKey] != p.Data["gen"] {
						return false, fmt.Sprintf("%s observed %q of %q", p.Name, p.Annotations[observedKey], p.Data["gen"])
					}
				}
				return true, ""
			})
			stop()

			lost := 0
			l, err := cms.List(timeout(t), metav1.ListOptions{LabelSelector: "ryw=parent"})
			if err != nil {
				t.Fatal(err)
			}
			o.mu.Lock()
			for _, p := range l.Items {
				count, _ := strconv.Atoi(p.Annotations[countKey])
				lost += o.statusWrites[ns+"/"+p.Name] - count
			}
			o.mu.Unlock()
			t.Logf("%d reconciles: %d read a cache older than their key's last write, %d duplicate creates, %d lost status increments; waits %v",
				o.reconciles.Load(), o.staleReads.Load(), o.duplicateCreate.Load(), lost, &waits.durations)
			t.Logf("a status write's answer to its event at the reflector (the %v lag, the server's and the proxy's share): %v; from there to the key's next reconcile (the library's share): %v",
				watchLag, &o.toArrival, &o.toReconcile)
			if off {
				if o.staleReads.Load() == 0 || o.duplicateCreate.Load() == 0 || lost == 0 {
					t.Fatalf("with read-your-writes off the lagging watch should show stale reads, duplicate creates and lost increments; saw %d, %d, %d",
						o.staleReads.Load(), o.duplicateCreate.Load(), lost)
				}
				return
			}
			if o.staleReads.Load() != 0 || o.duplicateCreate.Load() != 0 || lost != 0 {
				t.Fatalf("read-your-writes let %d reconciles read a cache older than their last write, %d children be created twice and %d status increments be lost",
					o.staleReads.Load(), o.duplicateCreate.Load(), lost)
			}
			// A gated key waits for its write's event to reach the cache, and at most 50 ms
			// more (at the 99th percentile): the watch's lag, as this run's server, proxy
			// and machine made it, is the bound, and the gate adds no more than that to it.
			if lag := o.toArrival.quantile(0.99); waits.quantile(0.99) > lag+50*time.Millisecond {
				t.Fatalf("gated keys waited %v at the 99th percentile, more than the writes' events took to reach the cache (%v) plus 50 ms", waits.quantile(0.99), lag)
			}
		})
	}
}

// createParents creates the parents p0..p<n-1>, labelled ryw=parent, at gen 0.
func createParents(t *testing.T, cms typedcorev1.ConfigMapInterface, n int) {
	t.Helper()
	for i := range n {
		if _, err := cms.Create(timeout(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i),
			Labels: map[string]string{"ryw": "parent"}}, Data: map[string]string{"gen": "0"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// selected returns reflector options with a label selector.
func selected(selector string) reflect.Options[cm] {
	return reflect.Options[cm]{ListOptions: func(o *metav1.ListOptions) { o.LabelSelector = selector }}
}

// waitRecorder records how long keys waited for their caches.
type waitRecorder struct {
	durations
	bounds atomic.Int64
	fence  atomic.Int64 // handover-b's fence, in ns
}

func (*waitRecorder) QueueDepth(string, int)                 {}
func (*waitRecorder) Retry(string)                           {}
func (*waitRecorder) ReconcileLatency(string, time.Duration) {}
func (*waitRecorder) ReconcileError(string, bool)            {}
func (*waitRecorder) KeysWaiting(string, int)                {}
func (w *waitRecorder) StaleBoundHit(string)                 { w.bounds.Add(1) }
func (w *waitRecorder) FenceDuration(loop string, d time.Duration) {
	if loop == "handover-b" {
		w.fence.Store(int64(d))
	}
}
func (w *waitRecorder) WriteWait(_ string, d time.Duration) { w.add(d) }

// durations is a set of measured durations, safe for concurrent use.
type durations struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (w *durations) add(d time.Duration) {
	w.mu.Lock()
	w.waits = append(w.waits, d)
	w.mu.Unlock()
}

func (w *durations) n() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waits)
}

// quantile returns the q-quantile of the durations, 0 when there are none.
func (w *durations) quantile(q float64) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.waits) == 0 {
		return 0
	}
	s := slices.Clone(w.waits)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))].Round(time.Millisecond)
}

// String is the durations' p50, p99 and max, and their number.
func (w *durations) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v (%d)", w.quantile(0.5), w.quantile(0.99), w.quantile(1), w.n())
}

// A leader hand-over, the new leader's watch 4 s behind: its first reconcile of each key
// reads a cache that holds the previous leader's last write of it (the Run's fence), and
// no status increment is lost. With read-your-writes off on the new leader, the same
// hand-over shows it reading older states.
func TestANewLeaderReadsThePreviousLeadersLastWrites(t *testing.T) {
	env, admin := setUp(t, "handover-on", "handover-off")
	const lag = 4 * time.Second
	for _, off := range []bool{false, true} {
		ns := map[bool]string{false: "handover-on", true: "handover-off"}[off]
		t.Run(ns, func(t *testing.T) {
			checkLeaksAtEnd(t, clientGoroutines...)
			const parents = 10
			cms := admin.kube.CoreV1().ConfigMaps(ns)
			createParents(t, cms, parents)
			var mu sync.Mutex
			lastWrite := map[string]uint64{} // by any leader, per parent
			firstRead := map[string]uint64{} // b's first reconcile of each parent: the version it read
			writes := map[string]int{}
			fenced := &waitRecorder{}
			replica := func(id string, cfg *rest.Config, disable bool) (stop func()) {
				c := newClients(t, cfg)
				parentsCache := testctl.New(t, c.kube.CoreV1().ConfigMaps(ns), controller.Options[cm]{Options: selected("ryw=parent")})
				loop, err := typed.NewLoop(parentsCache, typed.ReconcilerFunc[cm](func(ctx context.Context, req typed.Request[cm]) (typed.Result, error) {
					if req.Deleted {
						return typed.Result{}, nil
					}
					p := req.Object
					rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
					mu.Lock()
					if _, seen := firstRead[req.Key]; !seen && id == "b" {
						firstRead[req.Key] = rv
					}
					mu.Unlock()
					if p.Annotations[observedKey] == p.Data["gen"] {
						return typed.Result{}, nil
					}
					count, _ := strconv.Atoi(p.Annotations[countKey])
					patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, countKey, strconv.Itoa(count+1), observedKey, p.Data["gen"])
					written, err := admin.kube.CoreV1().ConfigMaps(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
					if err != nil {
						return typed.Result{}, err
					}
					consistency.Wrote(ctx, written)
					w, _ := strconv.ParseUint(written.ResourceVersion, 10, 64)
					mu.Lock()
					lastWrite[req.Key] = max(lastWrite[req.Key], w)
					writes[req.Key]++
					mu.Unlock()
					return typed.Result{}, nil
				}), typed.Options{Name: "handover-" + id, DisableReadYourWrites: disable, Metrics: fenced})
				if err != nil {
					t.Fatal(err)
				}
				le := leaderelection.Config{Client: c.kube.CoordinationV1(), Namespace: ns, Name: "ryw-leader", Identity: id,
					LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
				// Stopped by hand: a goes while b runs, so the subtest's final check, not
				// start's, looks for goroutines left behind.
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					done <- typed.RunAll(ctx, parentsCache.Run, func(ctx context.Context) error {
						return le.Run(ctx, func(ctx context.Context) { _ = loop.Run(ctx) })
					})
				}()
				var once sync.Once
				stop = func() {
					once.Do(func() {
						cancel()
						if err := receive(t, done, "replica "+id+" to stop"); err != nil {
							t.Errorf("replica %s: %v", id, err)
						}
					})
				}
				t.Cleanup(stop)
				return stop
			}
			observedAll := func(gen string) func() (bool, string) {
				return func() (bool, string) {
					l, err := cms.List(timeout(t), metav1.ListOptions{LabelSelector: "ryw=parent"})
					if err != nil {
						return false, err.Error()
					}
					for _, p := range l.Items {
						if p.Annotations[observedKey] != gen {
							return false, fmt.Sprintf("%s observed %q, want %q", p.Name, p.Annotations[observedKey], gen)
						}
					}
					return true, ""
				}
			}
			stopA := replica("a", env.AdminConfig(), false)
			waitUntil(t, "a leads and observes gen 0", observedAll("0"))
			stopB := replica("b", lagging(env.AdminConfig(), lag), off)
			time.Sleep(lag + time.Second) // b's cache, warm and 4 s behind, has synced

			// a's last writes: every parent moves to gen 1, a observes it, and a goes away
			// at once, releasing the Lease; b's cache has not seen a's writes yet.
			for i := range parents {
				if _, err := cms.Patch(timeout(t), fmt.Sprintf("p%d", i), types.MergePatchType, []byte(`{"data":{"gen":"1"}}`), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitUntil(t, "a observes gen 1", observedAll("1"))
			stopA()
			mu.Lock()
			aLast := maps.Clone(lastWrite)
			mu.Unlock()
			waitUntil(t, "b reconciles every parent", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				return len(firstRead) == parents, fmt.Sprintf("%d of %d", len(firstRead), parents)
			})
			stopB()

			mu.Lock()
			defer mu.Unlock()
			stale, lost := 0, 0
			for key, w := range aLast {
				if firstRead[key] < w {
					stale++
				}
			}
			l, err := cms.List(timeout(t), metav1.ListOptions{LabelSelector: "ryw=parent"})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range l.Items {
				count, _ := strconv.Atoi(p.Annotations[countKey])
				lost += writes[ns+"/"+p.Name] - count
			}
			t.Logf("b's first reconciles: %d of %d read a state older than a's last write; %d status increments lost; b's fence took %v",
				stale, parents, lost, time.Duration(fenced.fence.Load()).Round(time.Millisecond))
			if off {
				if stale == 0 {
					t.Fatal("with read-your-writes off the new leader should have read older states than the old leader's last writes")
				}
				return
			}
			if stale != 0 || lost != 0 {
				t.Fatalf("the new leader read %d parents older than the old leader's last write, and lost %d status increments", stale, lost)
			}
		})
	}
}
