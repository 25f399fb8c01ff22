package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
)

// libraryLogger is the logger the operator and the library log to: klog's at -v=1 and
// above, and otherwise one that prints errors only, so that the demo's own lines read
// uninterrupted unless something goes wrong.
func libraryLogger() logr.Logger {
	if klog.V(1).Enabled() {
		return klog.Background()
	}
	return funcr.New(func(prefix, args string) {
		fmt.Fprintf(os.Stderr, "  ! %s %s\n", prefix, args)
	}, funcr.Options{Verbosity: -1})
}

// loopMetrics counts a replica's reconciles. It is the replica's Manager's metrics
// (manager.Metrics: its caches' and its loop's), of which it counts only the loop's.
type loopMetrics struct{ reconciles, errors atomic.Int64 }

func (*loopMetrics) QueueDepth(string, int)                   {}
func (*loopMetrics) Retry(string)                             {}
func (m *loopMetrics) ReconcileLatency(string, time.Duration) { m.reconciles.Add(1) }
func (m *loopMetrics) ReconcileError(string, bool)            { m.errors.Add(1) }

func (*loopMetrics) Listed(string, int, time.Duration)            {}
func (*loopMetrics) WatchEvent(string, watch.EventType)           {}
func (*loopMetrics) ResourceVersion(string, string)               {}
func (*loopMetrics) ListWatchError(string)                        {}
func (*loopMetrics) EventQueueDepth(string, int)                  {}
func (*loopMetrics) HandlerLatency(string, string, time.Duration) {}
func (*loopMetrics) HandlerPanic(string, string)                  {}

// replica is one replica of the operator, running in this process as it would in a pod
// of its own: its own clients, caches, Manager and identity.
type replica struct {
	name    string
	op      *website.Operator
	metrics *loopMetrics
	cancel  context.CancelFunc
	done    chan error
	stopped bool
	// led is when this replica last saw itself become the leader.
	led atomic.Pointer[time.Time]
}

// Leader election is timed for a demo: a replica that stops releases the Lease, and a
// standby tries to take it every RetryPeriod; one that dies leaves it for LeaseDuration.
const (
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = 250 * time.Millisecond
)

func startReplica(ctx context.Context, config *rest.Config, ns, name string) (*replica, error) {
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	r := &replica{name: name, metrics: &loopMetrics{}, done: make(chan error, 1)}
	r.op, err = website.New(cs, config, website.Options{Namespace: ns, Metrics: r.metrics, LeaderElection: leaderelection.Config{
		Identity: name, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		OnNewLeader: func(identity string) {
			if identity == name {
				now := time.Now()
				r.led.Store(&now)
			}
		},
	}})
	if err != nil {
		return nil, err
	}
	ctx, r.cancel = context.WithCancel(klog.NewContext(ctx, klog.FromContext(ctx).WithValues("replica", name)))
	go func() { r.done <- r.op.Run(ctx) }()
	return r, nil
}

// stop stops the replica gracefully (its in-flight reconciles finish, then it releases
// the Lease) and returns what its Run returned.
func (r *replica) stop() error {
	if r.stopped {
		return nil
	}
	r.stopped = true
	r.cancel()
	if err := <-r.done; err != nil {
		return fmt.Errorf("replica %s: %w", r.name, err)
	}
	return nil
}

// leaseHolder returns who holds the operator's Lease in ns, "" if nobody.
func leaseHolder(ctx context.Context, cs kubernetes.Interface, ns string) (string, error) {
	lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, website.Component, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ptr.Deref(lease.Spec.HolderIdentity, ""), nil
}
