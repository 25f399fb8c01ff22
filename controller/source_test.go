package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
)

// A handler registered with the controllers of several namespaces has one Registration:
// synced only once every controller's part has, and removed as one.
func TestJoinSyncsOnceEveryPartHasAndRemovesThemAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := testctl.New(t, fake.New[obj, list](cm("default", "a", nil)), controller.Options[obj]{})
	b := testctl.New(t, fake.New[obj, list](cm("default", "b", nil)), controller.Options[obj]{})
	h := controller.HandlerFunc[obj](func(context.Context, event.Event[obj]) {})
	ra, err := a.AddHandler("h", h)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.AddHandler("h", h)
	if err != nil {
		t.Fatal(err)
	}
	removed := 0
	j := controller.Join([]*controller.Registration{ra, nil, rb}, func() { removed++ })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(runCtx) }()
	if err := ra.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if j.HasSynced() {
		t.Fatal("the join has synced while one of its parts has not")
	}
	go func() { _ = b.Run(runCtx) }()
	if err := j.WaitForSync(ctx); err != nil {
		t.Fatalf("the join never synced: %v", err)
	}
	if _, ok := a.Get("default/a"); !ok {
		t.Fatal("Get(default/a) found nothing in the synced controller")
	}
	j.Remove()
	j.Remove() // idempotent
	if removed != 1 {
		t.Fatalf("onRemove called %d times, want 1", removed)
	}
	if j.Pending() != 0 || ra.Pending() != 0 || rb.Pending() != 0 {
		t.Fatalf("Pending after Remove: join %d, parts %d and %d", j.Pending(), ra.Pending(), rb.Pending())
	}
	stop()
	<-done
}

// A join whose parts never sync, removed, leaves no goroutine waiting for them.
func TestJoinRemovedBeforeItsPartsSyncNeverSyncs(t *testing.T) {
	a := testctl.New(t, fake.New[obj, list](), controller.Options[obj]{})
	b := testctl.New(t, fake.New[obj, list](), controller.Options[obj]{})
	h := controller.HandlerFunc[obj](func(context.Context, event.Event[obj]) {})
	ra, _ := a.AddHandler("h", h)
	rb, _ := b.AddHandler("h", h)
	j := controller.Join([]*controller.Registration{ra, rb}, nil)
	j.Remove()
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := j.WaitForSync(ctx); err == nil {
		t.Fatal("a removed join of unsynced parts synced")
	}
	if !controller.Join(nil, nil).HasSynced() {
		t.Fatal("a join of nothing has not synced")
	}
}

// A nil Registration, what a failed AddHandler returns, answers without a panic.
func TestANilRegistrationAnswersWithoutAPanic(t *testing.T) {
	var r *controller.Registration
	r.Remove()
	if r.HasSynced() || r.Pending() != 0 || r.Synced() != nil {
		t.Errorf("a nil Registration: HasSynced %v, Pending %d, Synced %v; want false, 0, nil", r.HasSynced(), r.Pending(), r.Synced())
	}
	if err := r.WaitForSync(t.Context()); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("WaitForSync of a nil Registration = %v, want ErrNilArgument", err)
	}
}
