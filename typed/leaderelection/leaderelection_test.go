package leaderelection_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
)

// The durations of the leader elections that attack the guarantee that two replicas never
// lead at once. A candidate whose renewals fail stops leading about leRetryPeriod +
// leRenewDeadline after its last renewal, and its lead function takes leShutdown more to
// return: 1.5s, so a successor that must wait for the Lease to expire (leLeaseDuration)
// has 1.5s of margin on a loaded machine.
const (
	leLeaseDuration = 3 * time.Second // whole seconds, as the Lease stores it
	leRenewDeadline = time.Second
	leRetryPeriod   = 100 * time.Millisecond
	// leShutdown is how long a lead function takes to return once its context is
	// cancelled, as reconciles in flight finish: long enough for a Lease released before
	// lead has returned to let a successor lead alongside.
	leShutdown = 400 * time.Millisecond
)

const leNamespace, leName = "default", "test"

func leaderElection(id string, client coordinationv1client.LeasesGetter) leaderelection.Config {
	return leaderelection.Config{Client: client, Namespace: leNamespace, Name: leName, Identity: id,
		LeaseDuration: leLeaseDuration, RenewDeadline: leRenewDeadline, RetryPeriod: leRetryPeriod}
}

// rejectUpdates makes server reject, once cut is set, the Lease updates whose holder is
// one of holders.
func rejectUpdates(server *fake.Clientset, cut *atomic.Bool, holders ...string) {
	server.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		lease := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if cut.Load() && slices.Contains(holders, ptr.Deref(lease.Spec.HolderIdentity, "")) {
			return true, nil, apierrors.NewServiceUnavailable("lease update rejected")
		}
		return false, nil, nil
	})
}

var errPartitioned = errors.New("partitioned from the API server")

// candidateLeases is one candidate's client of the Leases of a fake API server shared
// by the candidates. It notes when the candidate's last successful write naming a holder
// was sent, and once partitioned is set it fails all of the candidate's requests, as if
// it could not reach the API server. aroundGet, when set, runs each Get.
type candidateLeases struct {
	coordinationv1client.LeasesGetter
	partitioned atomic.Bool
	aroundGet   func(get func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error)

	mu        sync.Mutex
	lastWrite time.Time
}

func (c *candidateLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return &candidateLease{LeaseInterface: c.LeasesGetter.Leases(namespace), c: c}
}

// lastHeld is when the candidate's last write naming a holder was sent: a successor can
// acquire the Lease only after it expires, a LeaseDuration later, unless it is released.
func (c *candidateLeases) lastHeld() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastWrite
}

func (c *candidateLeases) write(lease *coordinationv1.Lease, write func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	if c.partitioned.Load() {
		return nil, errPartitioned
	}
	sent := time.Now()
	got, err := write()
	if err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != "" {
		c.mu.Lock()
		c.lastWrite = sent
		c.mu.Unlock()
	}
	return got, err
}

type candidateLease struct {
	coordinationv1client.LeaseInterface
	c *candidateLeases
}

func (l *candidateLease) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	if l.c.partitioned.Load() {
		return nil, errPartitioned
	}
	get := func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Get(ctx, name, opts) }
	if l.c.aroundGet != nil {
		return l.c.aroundGet(get)
	}
	return get()
}

func (l *candidateLease) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return l.c.write(lease, func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Create(ctx, lease, opts) })
}

func (l *candidateLease) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return l.c.write(lease, func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Update(ctx, lease, opts) })
}

// leadership records who leads, as the candidates' lead functions report it.
type leadership struct {
	mu       sync.Mutex
	leading  []string    // the candidates whose lead is running
	overlaps []string    // each time a candidate started leading while another still did
	starts   []leadStart // each time a candidate started leading
	started  chan string // the candidates starting to lead, as they do
}

type leadStart struct {
	id string
	at time.Time
}

func newLeadership() *leadership { return &leadership{started: make(chan string, 16)} }

// lead is candidate id's lead function: once its context is cancelled it takes
// leShutdown to return.
func (l *leadership) lead(id string) func(context.Context) {
	return func(ctx context.Context) {
		l.mu.Lock()
		if len(l.leading) > 0 {
			l.overlaps = append(l.overlaps, fmt.Sprintf("%s started leading while %v still led", id, l.leading))
		}
		l.leading = append(l.leading, id)
		l.starts = append(l.starts, leadStart{id, time.Now()})
		l.mu.Unlock()
		select {
		case l.started <- id:
		default: // more leaderships than any test expects; starts has them all
		}
		<-ctx.Done()
		time.Sleep(leShutdown)
		l.mu.Lock()
		l.leading = slices.DeleteFunc(l.leading, func(s string) bool { return s == id })
		l.mu.Unlock()
	}
}

// candidate is a running LeaderElection.Run.
type candidate struct {
	id      string
	cancel  context.CancelFunc
	done    chan error
	stopped sync.Once
}

func campaign(le leaderelection.Config, lead func(context.Context)) *candidate {
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{id: le.Identity, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- le.Run(ctx, lead) }()
	return c
}

// stop cancels the candidate's Run and waits for it to return; it can be called again.
func (c *candidate) stop(t *testing.T) {
	t.Helper()
	c.stopped.Do(func() {
		c.cancel()
		if err := testwait.Recv(t, c.done, c.id+"'s Run returns once cancelled"); err != nil {
			t.Errorf("%s: Run = %v", c.id, err)
		}
	})
}

// Candidate a leads and b campaigns; then a is cut off as each case describes. b must
// not start leading before a's lead has returned (a's lead takes leShutdown to return
// once a stops leading), and must take over: at once if a could release the Lease, else
// once it expires.
func TestLeaderElectionNeverLetsASuccessorLeadBeforeTheLeaderHasStopped(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cutOff returns what cuts a off the API server, through server or a's client.
		cutOff func(server *fake.Clientset, a *candidateLeases) (cut func())
		// released: a can release the Lease, so b need not wait for it to expire.
		released bool
	}{{
		name: "renewals rejected, release accepted",
		cutOff: func(server *fake.Clientset, _ *candidateLeases) func() {
			var cut atomic.Bool
			rejectUpdates(server, &cut, "a")
			return func() { cut.Store(true) }
		},
		released: true,
	}, {
		name: "renewals and release rejected",
		cutOff: func(server *fake.Clientset, _ *candidateLeases) func() {
			var cut atomic.Bool
			rejectUpdates(server, &cut, "a", "")
			return func() { cut.Store(true) }
		},
	}, {
		name: "partitioned from the API server",
		cutOff: func(_ *fake.Clientset, a *candidateLeases) func() {
			return func() { a.partitioned.Store(true) }
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			server := leasefake.NewServer()
			aLeases := &candidateLeases{LeasesGetter: server.CoordinationV1()}
			cut := tc.cutOff(server, aLeases)
			leaders := newLeadership()

			a := campaign(leaderElection("a", aLeases), leaders.lead("a"))
			defer a.stop(t)
			if id := testwait.Recv(t, leaders.started, "a leads"); id != "a" {
				t.Fatalf("%s leads, want a, the only candidate", id)
			}
			bSawA := make(chan struct{})
			var once sync.Once
			leB := leaderElection("b", server.CoordinationV1())
			leB.OnNewLeader = func(id string) {
				if id == "a" {
					once.Do(func() { close(bSawA) })
				}
			}
			b := campaign(leB, leaders.lead("b"))
			defer b.stop(t)
			testwait.Recv(t, bSawA, "b sees a lead")
			cut()
			if id := testwait.Recv(t, leaders.started, "b takes over"); id != "b" {
				t.Fatalf("%s leads, want b", id)
			}
			a.stop(t)
			b.stop(t)

			leaders.mu.Lock()
			defer leaders.mu.Unlock()
			for _, o := range leaders.overlaps {
				t.Error(o)
			}
			var order []string
			for _, s := range leaders.starts {
				order = append(order, s.id)
			}
			if diff := cmp.Diff([]string{"a", "b"}, order); diff != "" {
				t.Fatalf("who started leading, in order (-want +got):\n%s", diff)
			}
			expiry := aLeases.lastHeld().Add(leLeaseDuration)
			bLeads := leaders.starts[1].at
			if tc.released && !bLeads.Before(expiry) {
				t.Errorf("b started leading %v after a's Lease expired: a did not release it", bLeads.Sub(expiry))
			}
			if !tc.released && bLeads.Before(expiry) {
				t.Errorf("b started leading %v before a's Lease expired, though a could not release it", expiry.Sub(bLeads))
			}
			goleak.VerifyNone(t)
		})
	}
}

func TestLeaderElectionHandsOverWhenTheLeaderStops(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	leading, overlap := "", false
	led := make(chan string, 4)
	candidate := func(id string) (context.CancelFunc, chan struct{}) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		le := leaderelection.Config{Client: client.CoordinationV1(), Namespace: "default", Name: "test", Identity: id,
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}
		go func() {
			defer close(done)
			_ = le.Run(ctx, func(ctx context.Context) {
				mu.Lock()
				if leading != "" {
					overlap = true
				}
				leading = id
				mu.Unlock()
				led <- id
				<-ctx.Done()
				mu.Lock()
				leading = ""
				mu.Unlock()
			})
		}()
		return cancel, done
	}
	cancelA, doneA := candidate("a")
	first := testwait.Recv(t, led, "a leads")
	if first != "a" {
		t.Fatalf("first leader = %q, want a (the only candidate)", first)
	}
	cancelB, doneB := candidate("b")
	cancelA() // the leader stops and releases the lease
	testwait.Recv(t, doneA, "a's Run returns once cancelled")
	select {
	case second := <-led:
		if second != "b" {
			t.Errorf("second leader = %q, want b", second)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b never took over")
	}
	cancelB()
	testwait.Recv(t, doneB, "b's Run returns once cancelled")
	mu.Lock()
	defer mu.Unlock()
	if overlap {
		t.Error("two replicas led at once")
	}
	goleak.VerifyNone(t)
}

func TestLeaderElectionReleasesTheLeaseOnlyAfterLeadReturns(t *testing.T) {
	client := fake.NewClientset()
	var leadReturned atomic.Bool
	releasedEarly := make(chan struct{})
	released := make(chan struct{})
	client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		lease := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if h := lease.Spec.HolderIdentity; h == nil || *h == "" {
			if !leadReturned.Load() {
				close(releasedEarly)
			}
			close(released)
		}
		return false, nil, nil
	})
	le := leaderelection.Config{Client: client.CoordinationV1(), Namespace: "default", Name: "test", Identity: "a",
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- le.Run(ctx, func(leadCtx context.Context) {
			close(leading)
			<-leadCtx.Done() // ends with ctx
			// Shutting down takes a while; a release now would let a successor lead
			// alongside. The wait only gives an early release time to show.
			select {
			case <-releasedEarly:
			case <-time.After(500 * time.Millisecond):
			}
			leadReturned.Store(true)
		})
	}()
	testwait.Recv(t, leading, "a leads")
	cancel()
	if err := testwait.Recv(t, done, "Run returns once cancelled"); err != nil {
		t.Fatalf("Run = %v", err)
	}
	select {
	case <-releasedEarly:
		t.Error("the lease was released while lead was still running")
	case <-released:
	default:
		t.Error("the lease was not released when Run returned")
	}
	goleak.VerifyNone(t)
}

// A leader whose lead returns after a successor has taken the Lease (its lead was
// slower to return than LeaseDuration allows) must leave the successor's Lease alone
// when it releases: whether the successor acquired it before the release read the
// Lease, or between that read and the release's write.
func TestLeaderElectionReleaseNeverOverwritesASuccessorsLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		// successorFirst: the successor acquires the Lease before the release reads it.
		successorFirst bool
	}{
		{name: "successor acquired before the release reads the lease", successorFirst: true},
		{name: "successor acquired between the release's read and write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := leasefake.NewServer()
			leases := server.CoordinationV1().Leases(leNamespace)
			bg := context.Background()
			var successors *coordinationv1.Lease
			succeed := func() {
				lease, err := leases.Get(bg, leName, metav1.GetOptions{})
				if err != nil {
					t.Errorf("the successor reads the lease: %v", err)
					return
				}
				now := metav1.NowMicro()
				lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To("b"), LeaseDurationSeconds: ptr.To[int32](3),
					AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To(*lease.Spec.LeaseTransitions + 1)}
				if successors, err = leases.Update(bg, lease, metav1.UpdateOptions{}); err != nil {
					t.Errorf("the successor acquires the lease: %v", err)
				}
			}
			var leadReturned, successorDone atomic.Bool
			aLeases := &candidateLeases{LeasesGetter: server.CoordinationV1()}
			aLeases.aroundGet = func(get func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
				// The first read after lead returned is the release's.
				if !leadReturned.Load() || !successorDone.CompareAndSwap(false, true) {
					return get()
				}
				if tc.successorFirst {
					succeed()
					return get()
				}
				lease, err := get()
				succeed()
				return lease, err
			}
			leading := make(chan struct{})
			a := campaign(leaderElection("a", aLeases), func(ctx context.Context) {
				close(leading)
				<-ctx.Done()
				leadReturned.Store(true)
			})
			testwait.Recv(t, leading, "a leads")
			a.stop(t)

			if !successorDone.Load() {
				t.Fatal("a's Run returned without reading the lease after lead returned")
			}
			got, err := leases.Get(bg, leName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(successors.Spec, got.Spec); diff != "" {
				t.Errorf("the successor's lease after a's release (-want +got):\n%s", diff)
			}
			goleak.VerifyNone(t)
		})
	}
}

// client-go calls OnNewLeader on goroutines it does not wait for; Run must not return
// while one of these calls still runs.
func TestLeaderElectionRunReturnsOnlyAfterOnNewLeaderHasReturned(t *testing.T) {
	var running atomic.Int32
	called := make(chan struct{}, 1)
	le := leaderElection("a", fake.NewClientset().CoordinationV1())
	le.OnNewLeader = func(string) {
		running.Add(1)
		defer running.Add(-1)
		select {
		case called <- struct{}{}:
		default:
		}
		time.Sleep(300 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err := le.Run(ctx, func(ctx context.Context) {
		testwait.Recv(t, called, "OnNewLeader is called")
		cancel()
		<-ctx.Done()
	})
	if n := running.Load(); err != nil || n != 0 {
		t.Errorf("Run = %v with %d OnNewLeader calls running, want <nil> with none", err, n)
	}
	goleak.VerifyNone(t)
}

func TestLeaderElectionNeedsAnIdentity(t *testing.T) {
	err := leaderelection.Config{Client: fake.NewClientset().CoordinationV1(), Name: "x"}.Run(context.Background(), func(context.Context) {})
	if !errors.Is(err, leaderelection.ErrNoIdentity) {
		t.Errorf("Run without identity = %v, want ErrNoIdentity", err)
	}
}

func TestLeaderElectionRefusesALeaseDurationTheLeaseCannotStore(t *testing.T) {
	tests := []struct {
		name     string
		duration time.Duration
		want     error
	}{
		{name: "not whole seconds: successors would read 1s and take over early", duration: 1500 * time.Millisecond, want: leaderelection.ErrLeaseDuration},
		{name: "below a second: successors would read 0s and take over at once", duration: 500 * time.Millisecond, want: leaderelection.ErrLeaseDuration},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			led := false
			err := leaderelection.Config{Client: fake.NewClientset().CoordinationV1(), Name: "x", Identity: "a", LeaseDuration: tt.duration}.
				Run(context.Background(), func(context.Context) { led = true })
			if !errors.Is(err, tt.want) || led {
				t.Errorf("Run with LeaseDuration %v = %v (led: %v), want %v without leading", tt.duration, err, led, tt.want)
			}
		})
	}
}

func TestLeaderElectionWaitsBeforeCampaigningAgainWhenLeadReturnsByItself(t *testing.T) {
	server := leasefake.NewServer()
	var leads atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	le := leaderElection("a", server.CoordinationV1())
	start := time.Now()
	if err := le.Run(ctx, func(context.Context) { leads.Add(1) }); err != nil {
		t.Fatal(err)
	}
	// At least one RetryPeriod passes between two terms, however fast the machine.
	if most := int32(time.Since(start)/le.RetryPeriod) + 1; leads.Load() > most {
		t.Errorf("lead ran %d times in %v, want at most %d (one per RetryPeriod %v)", leads.Load(), time.Since(start), most, le.RetryPeriod)
	}
	goleak.VerifyNone(t)
}

func TestLeaderElectionStopsAndReleasesEvenWhenLeadPanics(t *testing.T) {
	server := leasefake.NewServer()
	func() {
		defer func() {
			if v := recover(); v != "lead boom" {
				t.Errorf("recovered %v, want lead's own panic", v)
			}
		}()
		_ = leaderElection("a", server.CoordinationV1()).Run(context.Background(), func(context.Context) { panic("lead boom") })
	}()
	leaders := newLeadership()
	start := time.Now()
	b := campaign(leaderElection("b", server.CoordinationV1()), leaders.lead("b"))
	testwait.Recv(t, leaders.started, "b leads")
	if waited := time.Since(start); waited >= leLeaseDuration {
		t.Errorf("b led after %v: a's Lease was not released", waited)
	}
	b.stop(t)
	goleak.VerifyNone(t)
}

func TestLeaderElectionSurvivesAPanickingOnNewLeader(t *testing.T) {
	le := leaderElection("a", leasefake.NewServer().CoordinationV1())
	le.OnNewLeader = func(string) { panic("callback boom") }
	led := make(chan struct{})
	c := campaign(le, func(ctx context.Context) { close(led); <-ctx.Done() })
	testwait.Recv(t, led, "a leads despite its panicking OnNewLeader")
	c.stop(t)
	goleak.VerifyNone(t)
}

func TestLeaderElectionNeedsAClient(t *testing.T) {
	err := leaderelection.Config{Name: "x", Identity: "a"}.Run(context.Background(), func(context.Context) {})
	if !errors.Is(err, leaderelection.ErrNoClient) {
		t.Errorf("Run without a client = %v, want ErrNoClient", err)
	}
}

// TestRunHandingOverKeepsTheLeaseWhileLeadFinishes checks RunHandingOver's held context:
// after lead's context ends, the Lease stays this replica's until lead returns, and held
// ends RenewDeadline later, or as soon as a renewal fails.
func TestRunHandingOverKeepsTheLeaseWhileLeadFinishes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// end ends lead's term: the caller's context, or renewals that fail.
		end          func(cancel context.CancelFunc, cut *atomic.Bool)
		wantHolder   string // the Lease's holder once lead's context has ended
		wantHeldLate bool   // held still lasts then
	}{
		{"the caller's context ends", func(cancel context.CancelFunc, _ *atomic.Bool) { cancel() }, "a", true},
		{"renewals fail", func(_ context.CancelFunc, cut *atomic.Bool) { cut.Store(true) }, "a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := leasefake.NewServer()
			var cut atomic.Bool
			rejectUpdates(server, &cut, "a")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type seen struct {
				Holder     string
				HeldLasted bool
			}
			var got seen
			var heldEnded time.Time
			working := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- leaderElection("a", server.CoordinationV1()).RunHandingOver(ctx, func(ctx, held context.Context) {
					close(working)
					<-ctx.Done()
					got.HeldLasted = held.Err() == nil
					if l, err := server.CoordinationV1().Leases(leNamespace).Get(context.Background(), leName, metav1.GetOptions{}); err == nil {
						got.Holder = ptr.Deref(l.Spec.HolderIdentity, "")
					}
					<-held.Done()
					heldEnded = time.Now()
					cancel()
				})
			}()
			<-working
			// held's RenewDeadline runs from the end of lead's context, which is after this
			// instant; lead sees the end later still, so time it from here.
			ended := time.Now()
			tc.end(cancel, &cut)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(seen{Holder: tc.wantHolder, HeldLasted: tc.wantHeldLate}, got); diff != "" {
				t.Errorf("once lead's context ended (-want +got):\n%s", diff)
			}
			if tc.wantHeldLate && heldEnded.Sub(ended) < leRenewDeadline {
				t.Errorf("held ended %v after lead's context, want RenewDeadline (%v)", heldEnded.Sub(ended), leRenewDeadline)
			}
		})
	}
}
