package typed_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes/fake"

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
	first := <-led
	if first != "a" {
		t.Fatalf("first leader = %q, want a (the only candidate)", first)
	}
	cancelB, doneB := candidate("b")
	cancelA() // the leader stops and releases the lease
	<-doneA
	select {
	case second := <-led:
		if second != "b" {
			t.Errorf("second leader = %q, want b", second)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b never took over")
	}
	cancelB()
	<-doneB
	mu.Lock()
	defer mu.Unlock()
	if overlap {
		t.Error("two replicas led at once")
	}
	goleak.VerifyNone(t)
}

func TestLeaderElectionNeedsAnIdentity(t *testing.T) {
	err := typed.LeaderElection{Client: fake.NewClientset().CoordinationV1(), Name: "x"}.Run(context.Background(), func(context.Context) {})
	if !errors.Is(err, typed.ErrNoIdentity) {
		t.Errorf("Run without identity = %v, want ErrNoIdentity", err)
	}
}
