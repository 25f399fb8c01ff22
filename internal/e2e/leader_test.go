package e2e

// Leader election (leaderelection.Config) with two replicas of a typed.Loop.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
)

// A leader cut off from the Lease gives up at most a retry period and a renew deadline
// after its last renewal; a successor acquires no earlier than a lease duration after
// it. The lease duration leaves more than two seconds between the two, so that the
// partitioned test's "never two leaders" holds under the race detector on a loaded
// machine (with 3s the margin was 0.2-1.5s).
const (
	leaseDuration = 5 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 500 * time.Millisecond
	// handOverBound is the longest a hand-over may take: a lease duration and a
	// generous number of retry periods (client-go jitters each one by up to 1.2x).
	handOverBound = leaseDuration + 10*retryPeriod
)

// cuttableLeases is a LeasesGetter whose Get, Create and Update start failing once
// cut is set, as if the replica had lost its connection to the API server: it can
// neither renew nor release its lease.
type cuttableLeases struct {
	coordinationv1.LeasesGetter
	cut atomic.Bool
}

var errCutOff = errors.New("e2e: this replica is cut off from the API server")

func (c *cuttableLeases) Leases(namespace string) coordinationv1.LeaseInterface {
	return &cuttableLease{LeaseInterface: c.LeasesGetter.Leases(namespace), cut: &c.cut}
}

type cuttableLease struct {
	coordinationv1.LeaseInterface
	cut *atomic.Bool
}

func (l *cuttableLease) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordv1.Lease, error) {
	if l.cut.Load() {
		return nil, errCutOff
	}
	return l.LeaseInterface.Get(ctx, name, opts)
}

func (l *cuttableLease) Create(ctx context.Context, lease *coordv1.Lease, opts metav1.CreateOptions) (*coordv1.Lease, error) {
	if l.cut.Load() {
		return nil, errCutOff
	}
	return l.LeaseInterface.Create(ctx, lease, opts)
}

func (l *cuttableLease) Update(ctx context.Context, lease *coordv1.Lease, opts metav1.UpdateOptions) (*coordv1.Lease, error) {
	if l.cut.Load() {
		return nil, errCutOff
	}
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// reconcileRecord is one reconcile a replica did while its leadership context was live.
type reconcileRecord struct{ replica, key, value string }

// leadership records which replica leads and what each reconciled, and the violations
// of "only the leader reconciles".
type leadership struct {
	mu         sync.Mutex
	leading    map[string]bool        // between entering lead and lead's context ending
	inLead     map[string]bool        // between entering and leaving lead
	started    map[string][]time.Time // when each replica entered lead
	stopped    map[string][]time.Time // when each replica left lead
	recs       []reconcileRecord
	violations []string // reconciles by a replica that did not lead, or while another led
	overlaps   []string // a replica entered lead while another had not left it
}

func newLeadership() *leadership {
	return &leadership{leading: map[string]bool{}, inLead: map[string]bool{}, started: map[string][]time.Time{},
		stopped: map[string][]time.Time{}}
}

// lead wraps a replica's lead function with the bookkeeping.
func (l *leadership) lead(id string, run func(ctx context.Context)) func(ctx context.Context) {
	return func(ctx context.Context) {
		l.mu.Lock()
		for other, in := range l.inLead {
			if in {
				l.overlaps = append(l.overlaps, fmt.Sprintf("%s started leading while %s was still in its lead function", id, other))
			}
		}
		l.leading[id], l.inLead[id] = true, true
		l.started[id] = append(l.started[id], time.Now())
		l.mu.Unlock()
		stop := context.AfterFunc(ctx, func() {
			l.mu.Lock()
			l.leading[id] = false
			l.mu.Unlock()
		})
		defer func() {
			stop()
			l.mu.Lock()
			l.leading[id], l.inLead[id] = false, false
			l.stopped[id] = append(l.stopped[id], time.Now())
			l.mu.Unlock()
		}()
		run(ctx)
	}
}

// reconciled records a reconcile, and a violation if the replica did not lead or another
// one did.
func (l *leadership) reconciled(id, key, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading[id] {
		l.violations = append(l.violations, fmt.Sprintf("%s reconciled %s=%s while not leading", id, key, value))
	}
	for other, leads := range l.leading {
		if other != id && leads {
			l.violations = append(l.violations, fmt.Sprintf("%s reconciled %s=%s while %s was leading", id, key, value, other))
		}
	}
	l.recs = append(l.recs, reconcileRecord{replica: id, key: key, value: value})
}

// startedAt and stoppedAt return when id first entered and first left lead.
func (l *leadership) startedAt(id string) (time.Time, bool) { return l.first(l.started, id) }
func (l *leadership) stoppedAt(id string) (time.Time, bool) { return l.first(l.stopped, id) }

func (l *leadership) first(times map[string][]time.Time, id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(times[id]) == 0 {
		return time.Time{}, false
	}
	return times[id][0], true
}

// latest returns the value id last reconciled for each key.
func (l *leadership) latest(id string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for _, r := range l.recs {
		if r.replica == id {
			out[r.key] = r.value
		}
	}
	return out
}

// replica is one "process" of a leader-elected controller: a ConfigMap controller that
// always runs, and a Loop that runs only while its LeaderElection holds the Lease.
type replica struct {
	id     string
	leases *cuttableLeases
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, cfg *rest.Config, ns, id string, leaders *leadership) *replica {
	t.Helper()
	cs := newClients(t, cfg).kube
	configMaps := testctl.New(t, cs.CoreV1().ConfigMaps(ns), controller.Options[*corev1.ConfigMap]{Options: reflect.Options[*corev1.ConfigMap]{Name: "configmaps-" + id}})
	loop, err := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			// A reconciler's writes use its context: once leadership ends, it can do
			// nothing more.
			if ctx.Err() != nil {
				return typed.Result{}, ctx.Err()
			}
			value := "<deleted>"
			if !req.Deleted {
				value = req.Object.Data["v"]
			}
			leaders.reconciled(id, req.Key, value)
			time.Sleep(5 * time.Millisecond) // some work
			return typed.Result{}, nil
		}), typed.Options{Name: "loop-" + id, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, leases: &cuttableLeases{LeasesGetter: cs.CoordinationV1()}, done: make(chan error, 1)}
	le := leaderelection.Config{Client: r.leases, Namespace: ns, Name: "e2e-leader", Identity: id,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.done <- typed.RunAll(ctx, configMaps.Run, func(ctx context.Context) error {
			return le.Run(ctx, leaders.lead(id, func(ctx context.Context) {
				if err := loop.Run(ctx); err != nil {
					t.Errorf("%s: Loop.Run: %v", id, err)
				}
			}))
		})
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the replica and waits for it; it can be called more than once.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("replica %s: %v", r.id, err)
		}
	case <-time.After(waitTimeout):
		t.Errorf("replica %s did not stop within %v", r.id, waitTimeout)
	}
}

// updateLog is what the updater changed, and when.
type updateLog struct {
	mu    sync.Mutex
	at    map[string][]time.Time // each key's update times
	final map[string]string      // each key's last value
}

// TestLeaderElectionHandOver runs two replicas of a leader-elected ConfigMap
// reconciler. The first leads; it is then stopped while a goroutine keeps changing the
// ConfigMaps, and the second must take over within a lease duration and some retry
// periods, and reconcile every ConfigMap to its final value. Only the leader reconciles:
// no reconcile runs while another replica leads.
//
// graceful: the leader's context is cancelled, so it releases the Lease.
// partitioned: the leader is cut off from the Lease (renewals and the release fail) but
// keeps running: it must stop leading on its own when it cannot renew, and the other
// replica takes over only once the unreleased Lease has expired.
func TestLeaderElectionHandOver(t *testing.T) {
	cp, admin := setUp(t)
	cs := admin.kube
	for i, mode := range []string{"graceful", "partitioned"} {
		t.Run(mode, func(t *testing.T) {
			checkLeaksAtEnd(t, clientGoroutines...) // the control plane and cs outlive the subtest
			ns := "leader-" + strconv.Itoa(i)
			createNamespaces(t, cs, ns)
			ctx := context.Background()
			const n = 8
			keys := make([]string, n)
			for i := range n {
				name := fmt.Sprintf("cm-%d", i)
				keys[i] = ns + "/" + name
				if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
					Data: map[string]string{"v": "0"}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			leaders := newLeadership()
			a := startReplica(t, cp.AdminConfig(), ns, "a", leaders)
			waitUntil(t, "a leads and reconciles every ConfigMap", func() (bool, string) {
				got := leaders.latest("a")
				return len(got) == n, fmt.Sprintf("a reconciled %v", got)
			})
			b := startReplica(t, cp.AdminConfig(), ns, "b", leaders)

			// The updater changes every ConfigMap round after round; after the second round
			// the leader is stopped, and the updater goes on until b has led for a full round.
			updates := &updateLog{at: map[string][]time.Time{}, final: map[string]string{}}
			stopLeader := make(chan struct{})
			updaterDone := make(chan error, 1)
			go func() {
				updaterDone <- func() error {
					bRounds := 0
					for round := 1; round <= 300 && bRounds < 2; round++ {
						if _, ok := leaders.startedAt("b"); ok {
							bRounds++
						}
						for i := range n {
							name := fmt.Sprintf("cm-%d", i)
							value := strconv.Itoa(round)
							patch := fmt.Sprintf(`{"data":{"v":%q}}`, value)
							if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
								return err
							}
							updates.mu.Lock()
							updates.at[ns+"/"+name] = append(updates.at[ns+"/"+name], time.Now())
							updates.final[ns+"/"+name] = value
							updates.mu.Unlock()
							time.Sleep(30 * time.Millisecond) // pacing, not an assertion
						}
						if round == 2 {
							close(stopLeader)
						}
					}
					if bRounds < 2 {
						return errors.New("b never started leading while the updater ran")
					}
					return nil
				}()
			}()

			// The updater closes stopLeader after its second round, unless it failed first.
			select {
			case <-stopLeader:
			case err := <-updaterDone:
				t.Fatalf("the updater ended before its second round: %v", err)
			case <-time.After(waitTimeout):
				t.Fatalf("the updater did not finish two rounds within %v", waitTimeout)
			}
			stoppedAt := time.Now()
			switch mode {
			case "graceful":
				a.stop(t)
				lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, "e2e-leader", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder == "a" {
					t.Errorf("after a stopped, the lease is still held by a: it was not released")
				}
			case "partitioned":
				a.leases.cut.Store(true)
			}

			waitUntil(t, "b takes over", func() (bool, string) {
				_, ok := leaders.startedAt("b")
				return ok, "b has not started leading"
			})
			bStart, _ := leaders.startedAt("b")
			handOver := bStart.Sub(stoppedAt)
			t.Logf("%s hand-over: b started leading %v after a was stopped (bound %v)", mode, handOver.Round(time.Millisecond), handOverBound)
			if handOver > handOverBound {
				t.Errorf("%s hand-over took %v, want at most a lease duration and 10 retry periods (%v)", mode, handOver, handOverBound)
			}
			if mode == "partitioned" {
				aStop, ok := leaders.stoppedAt("a")
				if !ok {
					t.Errorf("a, cut off from the lease, never stopped leading")
				} else {
					t.Logf("partitioned: a stopped leading %v after it was cut off, %v before b started",
						aStop.Sub(stoppedAt).Round(time.Millisecond), bStart.Sub(aStop).Round(time.Millisecond))
				}
				// The lease was not released: b had to wait for it to expire.
				if min := leaseDuration - 3*retryPeriod; handOver < min {
					t.Errorf("partitioned hand-over took only %v: b cannot have waited for the unreleased lease to expire (at least %v)", handOver, min)
				}
			}

			if err := receive(t, updaterDone, "the updater ends once b has led for two rounds"); err != nil {
				t.Fatal(err)
			}
			updates.mu.Lock()
			final := maps.Clone(updates.final)
			var duringHandOver []string
			for key, times := range updates.at {
				if slices.ContainsFunc(times, func(at time.Time) bool { return at.After(stoppedAt) && at.Before(bStart) }) {
					duringHandOver = append(duringHandOver, key)
				}
			}
			updates.mu.Unlock()
			sort.Strings(duringHandOver)
			t.Logf("keys changed during the hand-over: %v", duringHandOver)
			waitUntil(t, "b reconciles every ConfigMap with its final value", func() (bool, string) {
				got := leaders.latest("b")
				return cmp.Equal(final, got), "(-final +b's last reconciled values):\n" + cmp.Diff(final, got)
			})

			a.stop(t)
			b.stop(t)
			leaders.mu.Lock()
			defer leaders.mu.Unlock()
			for _, v := range leaders.violations {
				t.Error(v)
			}
			// Whether a released the Lease after its lead returned or was cut off and
			// stopped at its renew deadline, b may lead only once a has stopped.
			for _, o := range leaders.overlaps {
				t.Error(o)
			}
			count := map[string]int{}
			for _, r := range leaders.recs {
				count[r.replica]++
			}
			t.Logf("reconciles per replica: %v", count)
		})
	}
}

// TestLeaderElectionReleasesTheLeaseOnlyAfterLeadReturns checks what
// LeaderElection.Run promises together with Loop.Run: a leader that is stopped lets its
// in-flight reconcile finish, and only then may another replica lead. The leader's
// reconcile here takes a few seconds to finish its work after the leader is stopped; the
// other replica must not start leading meanwhile.
func TestLeaderElectionReleasesTheLeaseOnlyAfterLeadReturns(t *testing.T) {
	const ns = "release"
	cp, admin := setUp(t, ns)
	cs := admin.kube
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "slow"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// work is how long a's reconcile needs to finish once started: longer than a
	// hand-over takes when the lease is released at once (at most about two retry
	// periods), short enough to keep the test quick once the bug is fixed.
	const work = 4 * time.Second
	var (
		mu                  sync.Mutex
		aStopped, bLeads    time.Time
		aLeft               time.Time
		inFlight, bStarted  = make(chan struct{}), make(chan struct{})
		bStartedWhileInWork bool
	)
	replica := func(id string) (stop func()) {
		cs := newClients(t, cp.AdminConfig()).kube
		configMaps := testctl.New(t, cs.CoreV1().ConfigMaps(ns), controller.Options[*corev1.ConfigMap]{})
		var once sync.Once
		loop, err := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
			func(context.Context, typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
				if id != "a" {
					return typed.Result{}, nil
				}
				once.Do(func() {
					close(inFlight)
					select { // the work; cut short once b leads, as the bug is then shown
					case <-bStarted:
						mu.Lock()
						bStartedWhileInWork = true
						mu.Unlock()
					case <-time.After(work):
					}
				})
				return typed.Result{}, nil
			}), typed.Options{})
		if err != nil {
			t.Fatal(err)
		}
		le := leaderelection.Config{Client: cs.CoordinationV1(), Namespace: ns, Name: "e2e-release", Identity: id,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- typed.RunAll(ctx, configMaps.Run, func(ctx context.Context) error {
				return le.Run(ctx, func(ctx context.Context) {
					if id == "b" {
						mu.Lock()
						bLeads = time.Now()
						mu.Unlock()
						close(bStarted)
					}
					_ = loop.Run(ctx)
					if id == "a" {
						mu.Lock()
						aLeft = time.Now()
						mu.Unlock()
					}
				})
			})
		}()
		return sync.OnceFunc(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("replica %s: %v", id, err)
				}
			case <-time.After(waitTimeout):
				t.Errorf("replica %s did not stop", id)
			}
		})
	}
	stopA := replica("a")
	defer stopA()
	receive(t, inFlight, "a leads and its reconcile is in flight")
	stopB := replica("b")
	defer stopB()
	mu.Lock()
	aStopped = time.Now()
	mu.Unlock()
	stopA() // a is stopped while its reconcile is in flight; this waits for a to return
	select {
	case <-bStarted:
	case <-time.After(waitTimeout):
		t.Fatal("b never started leading")
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("after a was stopped: b started leading at +%v, a's lead function returned at +%v",
		bLeads.Sub(aStopped).Round(time.Millisecond), aLeft.Sub(aStopped).Round(time.Millisecond))
	if bStartedWhileInWork || bLeads.Before(aLeft) {
		t.Errorf("b started leading %v after a was stopped, while a's reconcile was still in flight "+
			"(it needed %v): LeaderElection.Run released the lease before lead returned", bLeads.Sub(aStopped).Round(time.Millisecond), work)
	}
}
