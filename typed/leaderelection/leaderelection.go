// Package leaderelection runs work only while this process holds a Lease, through
// client-go's leaderelection, and gives the Lease up only once that work has returned,
// so that two replicas never lead at once (see Config).
package leaderelection

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	clientle "k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/guard"
)

// The durations a Config's zero LeaseDuration, RenewDeadline and RetryPeriod take:
// client-go's usual values, which sharding's Leases take too.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Config runs work only while this process holds a Lease, through client-go's
// leaderelection. The zero durations take client-go's usual values.
//
// Two replicas never lead at once: a replica's lead has returned before any other
// replica can acquire the Lease, whether its Run's context ends, it fails to renew the
// Lease, or it is cut off from the API server, provided LeaseDuration is long enough
// (see RenewDeadline).
type Config struct {
	// Client manages the Lease, e.g. clientset.CoordinationV1().
	Client coordinationv1.LeasesGetter
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity of this replica, unique among the replicas (a pod name, a hostname).
	Identity string
	// LeaseDuration is how long a lease is valid without renewal (15s when zero): the
	// longest a dead leader blocks a successor. It must be a whole number of seconds, as
	// the Lease stores it in seconds: a successor reading a rounded-down duration would
	// acquire the Lease while this replica still leads.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it gives up
	// leading (10s when zero). A leader cut off from the API server stops leading about
	// RetryPeriod plus RenewDeadline after its last renewal, plus the time lead takes to
	// return once its context is cancelled; a successor can acquire the Lease only
	// LeaseDuration after that renewal. Two replicas never lead at once only while
	// LeaseDuration exceeds that sum. RenewDeadline also bounds the release of the Lease.
	RenewDeadline time.Duration
	// RetryPeriod is how often candidates try to acquire or renew (2s when zero).
	RetryPeriod time.Duration
	// OnNewLeader, when set, is called with the identity of each new leader, on a
	// goroutine of its own (calls may overlap). Run returns only after such calls have
	// returned.
	OnNewLeader func(identity string)
}

// Run campaigns for the Lease until ctx is done. Each time it wins, it calls lead with a
// context that is cancelled when leadership is lost (the Lease could not be renewed
// within RenewDeadline) or ctx ends, and waits for lead to return before it campaigns
// again. Only once lead has returned does it release the Lease, so that a successor need
// not wait for it to expire; it releases it only if this replica still holds it, so a
// successor's Lease is never overwritten. A release that fails is logged, and a successor
// then acquires the Lease once it expires. Run returns with no goroutine left.
func (le Config) Run(ctx context.Context, lead func(ctx context.Context)) error {
	if lead == nil {
		return fmt.Errorf("%w: Run's lead", controller.ErrNilArgument)
	}
	return le.RunHandingOver(ctx, func(ctx, _ context.Context) { lead(ctx) })
}

// RunHandingOver is Run, with a second context given to lead: held, which ends only when
// this replica no longer holds the Lease (a renewal failed), or RenewDeadline after lead's
// own context ended. Once lead's context ends, the Lease stays held and renewed until
// lead returns, so that lead may use held to finish what a successor cannot do, such as
// reconciling the deletions it has queued (typed.Loop.RunHandingOver): the successor's
// cache cannot show them.
func (le Config) RunHandingOver(ctx context.Context, lead func(ctx, held context.Context)) error {
	if lead == nil {
		return fmt.Errorf("%w: RunHandingOver's lead", controller.ErrNilArgument)
	}
	if le.Identity == "" {
		return ErrNoIdentity
	}
	if guard.IsNil(le.Client) {
		return ErrNoClient
	}
	if le.LeaseDuration%time.Second != 0 {
		return fmt.Errorf("%w: %v", ErrLeaseDuration, le.LeaseDuration)
	}
	// client-go's ReleaseOnCancel is not used: on a renewal failure, client-go releases
	// the Lease before lead has returned, and a successor would lead alongside.
	cfg := clientle.LeaderElectionConfig{
		LeaseDuration: cmp.Or(le.LeaseDuration, DefaultLeaseDuration),
		RenewDeadline: cmp.Or(le.RenewDeadline, DefaultRenewDeadline),
		RetryPeriod:   cmp.Or(le.RetryPeriod, DefaultRetryPeriod),
		Name:          le.Name,
	}
	// client-go calls OnNewLeader on goroutines it does not wait for; Run waits for the
	// calls that have started and skips those that start after it has ended.
	var (
		notifyMu    sync.Mutex
		notifyEnded bool
		notifying   sync.WaitGroup
	)
	defer func() {
		notifyMu.Lock()
		notifyEnded = true
		notifyMu.Unlock()
		notifying.Wait()
	}()
	onNewLeader := func(identity string) {
		if le.OnNewLeader == nil {
			return
		}
		notifyMu.Lock()
		if notifyEnded {
			notifyMu.Unlock()
			return
		}
		notifying.Add(1)
		notifyMu.Unlock()
		defer notifying.Done()
		// client-go runs this on a goroutine of its own, where a panic would end the process.
		defer guard.LogPanic(klog.FromContext(ctx), nil, "OnNewLeader panicked", "lease", le.Namespace+"/"+le.Name)
		le.OnNewLeader(identity)
	}
	for ctx.Err() == nil {
		led, err := le.term(ctx, cfg, onNewLeader, lead)
		if err != nil {
			return err
		}
		if led && ctx.Err() == nil {
			// lead returned by itself (its loop failed or stopped): campaigning again at
			// once would acquire and release the Lease in a hot loop.
			klog.FromContext(ctx).Info("lead returned while the replica still campaigns; waiting before campaigning again",
				"lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
			t := time.NewTimer(wait.Jitter(cfg.RetryPeriod, 1.2))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	return nil
}

// term campaigns once: it runs the elector until it has acquired the Lease and lead has
// returned, or it stopped, or ctx ended, then releases the Lease if it still holds it. It
// reports whether lead ran. The elector is stopped and the Lease released even when lead
// panics.
func (le Config) term(ctx context.Context, cfg clientle.LeaderElectionConfig,
	onNewLeader func(string), lead func(ctx, held context.Context)) (led bool, err error) {
	// client-go starts OnStartedLeading on a goroutine it does not wait for, so lead runs
	// here instead, where term can wait for it.
	started := make(chan context.Context, 1)
	cfg.Lock = le.lock()
	cfg.Callbacks = clientle.LeaderCallbacks{
		OnStartedLeading: func(leadCtx context.Context) { started <- leadCtx },
		OnStoppedLeading: func() {},
		OnNewLeader:      onNewLeader,
	}
	elector, err := clientle.NewLeaderElector(cfg)
	if err != nil {
		return false, err
	}
	// The elector keeps renewing the Lease until lead has returned, even after ctx ends,
	// so that no successor can acquire it meanwhile.
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	electDone := make(chan struct{})
	go func() {
		defer close(electDone)
		elector.Run(electCtx)
	}()
	defer func() {
		cancelElect()
		<-electDone
		// The elector's last record names this replica when it acquired the Lease (even
		// if ctx ended before lead could start) and has not seen a successor take it.
		if elector.IsLeader() {
			le.release(ctx, cfg.RenewDeadline)
		}
	}()
	select {
	case leadCtx := <-started:
		logger := klog.FromContext(ctx).WithValues("lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
		logger.Info("started leading")
		// lead's context is held's child: when leadership is lost, held ends first, so
		// that lead, seeing its context end, finds held ended too.
		held, cancelHeld := context.WithCancel(leadCtx)
		runCtx, cancelRun := context.WithCancel(held)
		defer cancelRun()
		stop := context.AfterFunc(ctx, cancelRun)
		defer stop()
		defer logger.Info("stopped leading")
		endHeld := cancelAfter(runCtx, cfg.RenewDeadline, cancelHeld)
		defer endHeld()
		lead(runCtx, held)
		return true, nil
	case <-electDone:
	case <-ctx.Done():
	}
	return false, nil
}

func (le Config) lock() *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     guard.Leases(le.Client), // client-go dereferences a nil Lease returned with no error
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
}

// release gives up the Lease, as client-go's ReleaseOnCancel does, if it still names this
// replica: a successor may acquire it at once instead of waiting for it to expire. The
// update carries the resourceVersion its Get read, so it cannot overwrite a successor
// that acquired the Lease meanwhile; on such a conflict it reads the Lease again. It is
// called only once lead has returned and the elector has ended, and gives up after
// timeout, logging why.
func (le Config) release(ctx context.Context, timeout time.Duration) {
	logger := klog.FromContext(ctx).WithValues("lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	lock := le.lock()
	for {
		released, err := le.tryRelease(ctx, lock)
		switch {
		case apierrors.IsConflict(err) && ctx.Err() == nil:
			logger.V(4).Info("the lease changed while being released, reading it again")
			continue
		case err != nil:
			logger.Error(err, "releasing the lease failed; a successor can acquire it once it expires")
		case released:
			logger.Info("released the lease")
		}
		return
	}
}

// tryRelease releases the Lease if it names this replica, and reports whether it did.
func (le Config) tryRelease(ctx context.Context, lock *resourcelock.LeaseLock) (bool, error) {
	record, _, err := lock.Get(ctx)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if record.HolderIdentity != le.Identity {
		return false, nil // released already, or a successor holds it
	}
	now := metav1.NewTime(time.Now())
	err = lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions:    record.LeaderTransitions,
		LeaseDurationSeconds: 1,
		RenewTime:            now,
		AcquireTime:          now,
	})
	return err == nil, err
}

// cancelAfter calls cancel d after end has ended. The function it returns stops the
// timer and calls cancel at once.
func cancelAfter(end context.Context, d time.Duration, cancel context.CancelFunc) func() {
	var (
		mu      sync.Mutex
		timer   *time.Timer
		stopped bool
	)
	stopAfter := context.AfterFunc(end, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			timer = time.AfterFunc(d, cancel)
		}
	})
	return func() {
		stopAfter()
		mu.Lock()
		stopped = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}
