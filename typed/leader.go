package typed

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// LeaderElection runs work only while this process holds a Lease, through client-go's
// leaderelection. The zero durations take client-go's usual values.
type LeaderElection struct {
	// Client manages the Lease, e.g. clientset.CoordinationV1().
	Client coordinationv1.LeasesGetter
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity of this replica, unique among the replicas (a pod name, a hostname).
	Identity string
	// LeaseDuration is how long a lease is valid without renewal (15s when zero): the
	// longest a dead leader blocks a successor.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it gives up
	// leading (10s when zero). A leader cut off from the API server stops leading about
	// RetryPeriod plus RenewDeadline after its last renewal, plus the time lead takes to
	// return; a successor can acquire the Lease only LeaseDuration after that renewal.
	// Two replicas never lead at once only while LeaseDuration exceeds that sum.
	RenewDeadline time.Duration
	// RetryPeriod is how often candidates try to acquire or renew (2s when zero).
	RetryPeriod time.Duration
	// OnNewLeader, when set, is called with the identity of each new leader.
	OnNewLeader func(identity string)
}

// ErrNoIdentity is returned by Run when LeaderElection.Identity is empty.
var ErrNoIdentity = errors.New("leader election needs an identity")

// Run campaigns for the Lease until ctx is done. Each time it wins, it calls lead with a
// context that is cancelled when leadership is lost or ctx ends, and waits for lead to
// return before it campaigns again. It releases the Lease only after lead has returned
// (so two replicas never lead at once), without waiting for it to expire, and returns
// with no goroutine left.
func (le LeaderElection) Run(ctx context.Context, lead func(ctx context.Context)) error {
	if le.Identity == "" {
		return ErrNoIdentity
	}
	cfg := leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
			Client:     le.Client,
			LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
		},
		LeaseDuration:   orDefault(le.LeaseDuration, 15*time.Second),
		RenewDeadline:   orDefault(le.RenewDeadline, 10*time.Second),
		RetryPeriod:     orDefault(le.RetryPeriod, 2*time.Second),
		ReleaseOnCancel: true,
		Name:            le.Name,
	}
	for ctx.Err() == nil {
		// client-go starts OnStartedLeading on a goroutine it does not wait for, so lead
		// runs here instead, where Run can wait for it.
		started := make(chan context.Context, 1)
		cfg.Callbacks = leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) { started <- leadCtx },
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				if le.OnNewLeader != nil {
					le.OnNewLeader(identity)
				}
			},
		}
		elector, err := leaderelection.NewLeaderElector(cfg)
		if err != nil {
			return err
		}
		// The elector outlives ctx until lead has returned: it releases the Lease when its
		// context ends, and a successor must not lead while this replica still does.
		electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
		electDone := make(chan struct{})
		go func() {
			defer close(electDone)
			elector.Run(electCtx)
		}()
		select {
		case leadCtx := <-started:
			klog.FromContext(ctx).Info("started leading", "lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
			runCtx, cancelRun := context.WithCancel(leadCtx)
			stop := context.AfterFunc(ctx, cancelRun)
			lead(runCtx)
			stop()
			cancelRun()
		case <-electDone:
		case <-ctx.Done():
		}
		cancelElect()
		<-electDone
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
