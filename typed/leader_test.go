package typed_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/typed"
)

func TestLeaderElectionHandsOverWhenTheLeaderStops(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	leading, overlap := "", false
	led := make(chan string, 4)
	candidate := func(id string) (context.CancelFunc, chan struct{}) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		le := typed.LeaderElection{Client: client.CoordinationV1(), Namespace: "default", Name: "test", Identity: id,
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
	first := receive(t, led, "a leads")
	if first != "a" {
		t.Fatalf("first leader = %q, want a (the only candidate)", first)
	}
	cancelB, doneB := candidate("b")
	cancelA() // the leader stops and releases the lease
	receive(t, doneA, "a's Run returns once cancelled")
	select {
	case second := <-led:
		if second != "b" {
			t.Errorf("second leader = %q, want b", second)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b never took over")
	}
	cancelB()
	receive(t, doneB, "b's Run returns once cancelled")
	mu.Lock()
	defer mu.Unlock()
	if overlap {
		t.Error("two replicas led at once")
	}
	verifyNoLeaks(t)
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
	le := typed.LeaderElection{Client: client.CoordinationV1(), Namespace: "default", Name: "test", Identity: "a",
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
	receive(t, leading, "a leads")
	cancel()
	if err := receive(t, done, "Run returns once cancelled"); err != nil {
		t.Fatalf("Run = %v", err)
	}
	select {
	case <-releasedEarly:
		t.Error("the lease was released while lead was still running")
	case <-released:
	default:
		t.Error("the lease was not released when Run returned")
	}
	verifyNoLeaks(t)
}

func TestLeaderElectionNeedsAnIdentity(t *testing.T) {
	err := typed.LeaderElection{Client: fake.NewClientset().CoordinationV1(), Name: "x"}.Run(context.Background(), func(context.Context) {})
	if !errors.Is(err, typed.ErrNoIdentity) {
		t.Errorf("Run without identity = %v, want ErrNoIdentity", err)
	}
}
