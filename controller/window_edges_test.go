package controller_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
)

// stuckList is a ListerWatcher whose List waits for release, whatever its context says:
// a request the client does not abandon at once, which keeps Run in its shutdown after
// its context ended.
type stuckList struct {
	*fake.ListerWatcher[obj, list]
	listing chan struct{}
	release chan struct{}
}

func (s *stuckList) List(ctx context.Context, opts metav1.ListOptions) (list, error) {
	close(s.listing)
	<-s.release
	return s.ListerWatcher.List(ctx, opts)
}

// TestAddHandlerOnceRunsContextEndedIsErrStopped: a handler added after Run's context
// ended, while Run is still stopping, is refused with ErrStopped. It would never sync nor
// see an event: Run stops it with the others. Before the fix AddHandler returned a
// Registration and nil, and the Registration never synced (DESIGN 11: a handler added
// while running first receives the current state).
func TestAddHandlerOnceRunsContextEndedIsErrStopped(t *testing.T) {
	defer goleak.VerifyNone(t)
	src := &stuckList{ListerWatcher: fake.New[obj, list](cm("ns", "a", nil)), listing: make(chan struct{}), release: make(chan struct{})}
	c := testctl.New(t, src, controller.Options[obj]{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-src.listing
	cancel()

	reg, err := c.AddHandler("late", newRecorder())
	if !errors.Is(err, controller.ErrStopped) {
		t.Errorf("AddHandler after Run's context ended: got (%v, %v), want ErrStopped", reg, err)
	}
	close(src.release)
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}
