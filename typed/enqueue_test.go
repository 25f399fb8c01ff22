package typed_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

// TestEnqueueReconcilesAKeyOnceWhetherOrNotTheLoopRuns: a key enqueued by hand is
// reconciled while the Loop runs; keys enqueued while it does not run wait, each as many
// times as it was enqueued, and the next Run reconciles each once.
func TestEnqueueReconcilesAKeyOnceWhetherOrNotTheLoopRuns(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	got := newCalls()
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, c.Run)
	if err := c.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}

	for range 3 { // before the first Run
		l.Enqueue("ns/a")
		l.Enqueue("ns/gone")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	// ns/a also comes from the controller's current state: one reconcile either way.
	waiting := got.wait(t, 2)
	l.Enqueue("ns/while-running")
	running := got.wait(t, 3)[2:]
	cancel()
	if err := receive(t, done, "Run returns once cancelled"); err != nil {
		t.Fatal(err)
	}
	l.Enqueue("ns/gone") // after Run returned: waits for the next one
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- l.Run(ctx) }()
	next := got.wait(t, 5)[3:]
	cancel()
	if err := receive(t, done, "Run returns once cancelled"); err != nil {
		t.Fatal(err)
	}

	want := map[string][]string{
		"enqueued before the first Run": {"ns/a value=1", "ns/gone deleted"},
		"enqueued while running":        {"ns/while-running deleted"},
		"enqueued between Runs":         {"ns/a value=1", "ns/gone deleted"},
	}
	gotByPhase := map[string][]string{
		"enqueued before the first Run": slices.Sorted(slices.Values(waiting)),
		"enqueued while running":        running,
		"enqueued between Runs":         slices.Sorted(slices.Values(next)), // ns/a again from the current state
	}
	if diff := cmp.Diff(want, gotByPhase); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}
