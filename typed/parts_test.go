package typed_test

// Tests of a Loop over a Source with Parts (such as the shards a replica holds), against
// DESIGN 14 (one worker per key, never more than Workers) and 15 (deletions never lost,
// state never leaks): a part given up interrupts its reconciles and drops its live keys;
// its deletions are reconciled by HandOver, within the workers' bound, and nothing of it
// is kept after Forget.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

// partedSource is a controller whose keys are in two parts: "ns/p1-..." in part 1, the
// others in part 2. A part is held until let go, and its context ends when given up.
type partedSource struct {
	*controller.Controller[obj, list]
	mu    sync.Mutex
	parts map[int]context.Context
	stops map[int]context.CancelFunc
}

func newPartedSource(t *testing.T, src *fake.ListerWatcher[obj, list]) *partedSource {
	p := &partedSource{Controller: testctl.New(t, src, controller.Options[obj]{}), parts: map[int]context.Context{}, stops: map[int]context.CancelFunc{}}
	for _, i := range []int{1, 2} {
		p.parts[i], p.stops[i] = context.WithCancel(context.Background())
	}
	return p
}

func partOf(key string) int {
	if strings.HasPrefix(key, "ns/p1-") {
		return 1
	}
	return 2
}

// mine selects the deletions of part 1.
func mine(key string, _ obj) bool { return partOf(key) == 1 }

func (p *partedSource) Part(key string, _ obj) (context.Context, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, ok := p.parts[partOf(key)]
	return ctx, ok
}

// giveUp ends part i's context: its keys are being handed over.
func (p *partedSource) giveUp(i int) context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stops[i]()
	return p.parts[i]
}

// letGo makes part i no longer held.
func (p *partedSource) letGo(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.parts, i)
}

func TestAPartGivenUpDropsItsLiveKeysAndItsHandOverReconcilesItsDeletions(t *testing.T) {
	src := fake.New[obj, list](cm("p1-a", "1"), cm("p1-b", "1"), cm("p1-c", "1"), cm("p2-a", "1"))
	ps := newPartedSource(t, src)
	got := newCalls()
	blocked, interrupted := make(chan struct{}), make(chan error, 1)
	var errs []error
	var errMu sync.Mutex
	l, err := typed.NewLoop[obj](ps, typed.ReconcilerFunc[obj](func(ctx context.Context, req typed.Request[obj]) (typed.Result, error) {
		if req.Key == "ns/p1-a" && !req.Deleted && req.Object.Data["v"] == "2" {
			close(blocked)
			<-ctx.Done() // in flight until its part is given up
			interrupted <- ctx.Err()
			return typed.Result{}, ctx.Err()
		}
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{Workers: 1, OnError: func(_ context.Context, _ string, err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, ps.Run, l.Run)
	got.wait(t, 4)

	mustUpdate(t, src, cm("p1-a", "2"))
	<-blocked
	mustUpdate(t, src, cm("p1-b", "2"))
	if _, err := src.Delete("ns", "p1-c"); err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, src, cm("p2-a", "2"))
	eventually(t, "the three changes queued behind p1-a", func() bool { live, _ := l.Queued(); return live == 3 })

	part := ps.giveUp(1)
	if err := receive(t, interrupted, "p1-a's reconcile interrupted"); !errors.Is(err, context.Canceled) {
		t.Errorf("p1-a's reconcile ended with %v, want its context cancelled", err)
	}
	if err := l.HandOver(part, context.Background(), mine); err != nil {
		t.Fatal(err)
	}
	all := got.wait(t, 6)
	after := slices.Clone(all[4:])
	slices.Sort(after)
	if diff := cmp.Diff([]string{"ns/p1-c deleted, last value=1", "ns/p2-a value=2"}, after); diff != "" {
		t.Errorf("reconciles after part 1 was given up (-want +got):\n%s", diff)
	}
	ps.letGo(1)
	l.Forget(mine)
	eventually(t, "nothing left queued", func() bool { live, sync := l.Queued(); return live+sync == 0 })
	if n := l.Tombstones(); n != 0 {
		t.Errorf("%d last states kept after the hand-over, want 0", n)
	}
	time.Sleep(50 * time.Millisecond) // what a dropped key would do, it would have done
	if all := got.wait(t, 6); len(all) != 6 {
		t.Errorf("reconciles after the hand-over: %v, want none (p1-b is the next holder's)", all[6:])
	}
	errMu.Lock()
	defer errMu.Unlock()
	if len(errs) != 0 {
		t.Errorf("errors reported: %v, want none (an interrupted reconcile is not a failure)", errs)
	}
}

func TestADeletionAWorkerTookAfterItsPartEndedIsStillHandedOver(t *testing.T) {
	src := fake.New[obj, list](cm("p1-a", "1"), cm("p2-a", "1"))
	ps := newPartedSource(t, src)
	got := newCalls()
	l, err := typed.NewLoop[obj](ps, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, ps.Run, l.Run)
	got.wait(t, 2)

	// The part ends before its holder starts the hand-over; the deletion arrives and a
	// worker takes it meanwhile, and must leave its last state to the hand-over.
	part := ps.giveUp(1)
	if _, err := src.Delete("ns", "p1-a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker took the deletion and kept its last state", func() bool {
		live, sync := l.Queued()
		return live+sync == 0 && l.Tombstones() == 1
	})
	if err := l.HandOver(part, context.Background(), mine); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ns/p1-a deleted, last value=1"}, got.wait(t, 3)[2:]); diff != "" {
		t.Errorf("the hand-over's reconciles (-want +got):\n%s", diff)
	}
}

func TestAHandOverTakesTheWorkersSlots(t *testing.T) {
	src := fake.New[obj, list](cm("p1-a", "1"), cm("p2-a", "1"))
	ps := newPartedSource(t, src)
	got := newCalls()
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	blocked := make(chan struct{})
	l, err := typed.NewLoop[obj](ps, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if req.Key == "ns/p2-a" && !req.Deleted && req.Object.Data["v"] == "2" {
			close(blocked)
			<-release
		}
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, ps.Run, l.Run)
	got.wait(t, 2)

	mustUpdate(t, src, cm("p2-a", "2"))
	<-blocked // the only worker is busy with part 2
	if _, err := src.Delete("ns", "p1-a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "p1-a's deletion queued", func() bool { live, _ := l.Queued(); return live == 1 })
	part := ps.giveUp(1)
	handedOver := make(chan error, 1)
	go func() { handedOver <- l.HandOver(part, context.Background(), mine) }()
	time.Sleep(50 * time.Millisecond) // time for a hand-over that would not wait for a slot
	if all := got.wait(t, 2); len(all) != 2 {
		t.Errorf("reconciled %v while the only worker was busy, want nothing before it is free", all[2:])
	}
	close(release)
	if err := receive(t, handedOver, "HandOver returns"); err != nil {
		t.Fatal(err)
	}
	all := got.wait(t, 4)
	if diff := cmp.Diff([]string{"ns/p2-a value=2", "ns/p1-a deleted, last value=1"}, all[2:]); diff != "" {
		t.Errorf("reconciles once the worker was free (-want +got):\n%s", diff)
	}
	if m := most.Load(); m > 1 {
		t.Errorf("%d reconciles at once, want at most Options.Workers = 1", m)
	}
}

// A reconciler that ignores its context holds up its part's hand-over only while held
// lasts: HandOver then returns without reconciling the part's deletion beside it (one
// worker per key), and the Loop keeps serving the other part.
func TestAHandOverWaitingOnAStuckReconcileEndsWithHeld(t *testing.T) {
	src := fake.New[obj, list](cm("p1-a", "1"), cm("p1-b", "1"), cm("p2-a", "1"))
	ps := newPartedSource(t, src)
	got := newCalls()
	stuck, release := make(chan struct{}), make(chan struct{})
	l, err := typed.NewLoop[obj](ps, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		if req.Key == "ns/p1-a" && !req.Deleted && req.Object.Data["v"] == "2" {
			close(stuck)
			<-release // ignores its context
		}
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, ps.Run, l.Run)
	defer close(release)
	got.wait(t, 3)

	mustUpdate(t, src, cm("p1-a", "2"))
	<-stuck
	if _, err := src.Delete("ns", "p1-b"); err != nil {
		t.Fatal(err)
	}
	got.wait(t, 4) // p1-b's deletion, by the other worker
	if _, err := src.Delete("ns", "p1-a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "p1-a's deletion waits behind its stuck reconcile", func() bool { return l.Tombstones() == 1 })
	part := ps.giveUp(1)
	held, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.HandOver(part, held, mine); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("HandOver returned %v after held ended, want at once", d)
	}
	if all := got.wait(t, 4); len(all) != 4 {
		t.Errorf("reconciled %v beside p1-a's stuck reconcile, want nothing", all[4:])
	}
	mustUpdate(t, src, cm("p2-a", "2"))
	if diff := cmp.Diff([]string{"ns/p2-a value=2"}, got.wait(t, 5)[4:]); diff != "" {
		t.Errorf("the other part after the hand-over (-want +got):\n%s", diff)
	}
	ps.letGo(1)
	l.Forget(mine)
	if n := l.Tombstones(); n != 0 {
		t.Errorf("%d last states kept after Forget, want 0", n)
	}
}

// Two parts handed over at once each reconcile their own deletions, once.
func TestTwoPartsHandedOverAtOnceReconcileEachTheirOwnDeletions(t *testing.T) {
	src := fake.New[obj, list](cm("p1-a", "1"), cm("p2-a", "1"))
	ps := newPartedSource(t, src)
	got := newCalls()
	release := make(chan struct{})
	var busy atomic.Bool
	l, err := typed.NewLoop[obj](ps, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		if req.Key == "ns/p2-a" && !req.Deleted && req.Object.Data["v"] == "2" && !busy.Swap(true) {
			<-release // keeps the only worker, so both deletions stay queued
		}
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(context.Background(), t, ps.Run, l.Run)
	got.wait(t, 2)
	if _, err := src.Create(cm("p2-b", "1")); err != nil {
		t.Fatal(err)
	}
	got.wait(t, 3)
	mustUpdate(t, src, cm("p2-a", "2"))
	eventually(t, "the worker busy", func() bool { return busy.Load() })
	for _, name := range []string{"p1-a", "p2-b"} {
		if _, err := src.Delete("ns", name); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "both deletions queued", func() bool { live, _ := l.Queued(); return live == 2 })
	p1, p2 := ps.giveUp(1), ps.giveUp(2)
	close(release)
	errs := make(chan error, 2)
	go func() { errs <- l.HandOver(p1, context.Background(), mine) }()
	go func() {
		errs <- l.HandOver(p2, context.Background(), func(key string, last obj) bool { return !mine(key, last) })
	}()
	for range 2 {
		if err := receive(t, errs, "both hand-overs return"); err != nil {
			t.Fatal(err)
		}
	}
	after := got.wait(t, 6)[3:]
	slices.Sort(after)
	if diff := cmp.Diff([]string{"ns/p1-a deleted, last value=1", "ns/p2-a value=2", "ns/p2-b deleted, last value=1"}, after); diff != "" {
		t.Errorf("reconciles once both parts were given up (-want +got):\n%s", diff)
	}
}

func TestHandOverRefusesNilArguments(t *testing.T) {
	l, err := typed.NewLoop[obj](newPartedSource(t, fake.New[obj, list]()), typed.ReconcilerFunc[obj](func(context.Context, typed.Request[obj]) (typed.Result, error) {
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, err := range map[string]error{
		"part":     l.HandOver(nil, ctx, mine),
		"held":     l.HandOver(ctx, nil, mine),
		"selector": l.HandOver(ctx, ctx, nil),
	} {
		if !errors.Is(err, controller.ErrNilArgument) {
			t.Errorf("HandOver with a nil %s: %v, want an error wrapping ErrNilArgument", name, err)
		}
	}
	if err := l.HandOver(ctx, ctx, mine); err != nil {
		t.Errorf("HandOver of a Loop that does not run: %v, want nil (nothing to hand over)", err)
	}
}

func mustUpdate(t *testing.T, src *fake.ListerWatcher[obj, list], o obj) {
	t.Helper()
	if _, err := src.Update(o); err != nil {
		t.Fatal(err)
	}
}
