package queue_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/queue"
)

// step is one delivered event, reduced to what the tests compare.
type step struct {
	Key  string
	Type event.Type
	RV   string
}

// consumer records what it is handed; its hooks run inside Apply, Deliver and Report.
type consumer struct {
	mu        sync.Mutex
	batches   [][]step
	errs      []error
	applyErrs []error
	onDeliver func([]ev)
	onReport  func([]error)
}

func (c *consumer) Apply(batch []ev) ([]ev, []error) {
	errs := c.applyErrs
	c.applyErrs = nil
	return batch, errs
}

func (c *consumer) Deliver(batch []ev) {
	steps := make([]step, len(batch))
	for i, e := range batch {
		steps[i] = step{Key: e.Key, Type: e.Type, RV: e.Object.ResourceVersion}
	}
	c.mu.Lock()
	c.batches = append(c.batches, steps)
	c.mu.Unlock()
	if c.onDeliver != nil {
		c.onDeliver(batch)
	}
}

func (c *consumer) Report(errs []error) {
	c.mu.Lock()
	c.errs = append(c.errs, errs...)
	c.mu.Unlock()
	if c.onReport != nil {
		c.onReport(errs)
	}
}

func (c *consumer) got() [][]step {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]step(nil), c.batches...)
}

func push(b *queue.Backlog[*corev1.ConfigMap], key, rv string, typ event.Type) {
	b.Push(ev{Type: typ, Key: "ns/" + key, Object: cm(key, rv)})
}

func TestConsumeHandsOverKeysInLineOrderEachEventWithItsKey(t *testing.T) {
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
	push(b, "a", "1", event.Added)
	push(b, "b", "2", event.Added)
	push(b, "a", "3", event.Modified) // merges into a's pending addition; a keeps its place
	push(b, "c", "4", event.Added)
	push(b, "b", "5", event.Deleted) // b was unknown: its addition and deletion cancel out
	c := &consumer{}
	if n := b.Consume(c, 1); n != 1 {
		t.Fatalf("Consume(1) took %d keys, want 1", n)
	}
	if n := b.Consume(c, math.MaxInt); n != 1 {
		t.Fatalf("Consume(MaxInt) took %d keys, want the 1 left", n)
	}
	if n := b.Consume(c, math.MaxInt); n != 0 {
		t.Fatalf("Consume on an empty backlog took %d keys", n)
	}
	want := [][]step{
		{{Key: "ns/a", Type: event.Added, RV: "3"}},
		{{Key: "ns/c", Type: event.Added, RV: "4"}},
	}
	if diff := cmp.Diff(want, c.got()); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
}

func TestDrainTakesManyKeysPerBatchWhileTheConsumerIsBusy(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
	release := make(chan struct{})
	first := make(chan struct{})
	c := &consumer{}
	var once sync.Once
	c.onDeliver = func([]ev) { once.Do(func() { close(first); <-release }) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	push(b, "k0", "1", event.Added)
	go func() { done <- b.Drain(ctx, c) }()
	testwait.Receive(t, first, "the first batch", 30*time.Second)
	const keys = 300
	for i := 1; i <= keys; i++ {
		push(b, fmt.Sprint("k", i), "1", event.Added)
	}
	close(release)
	testwait.Eventually(t, "every key delivered", func() bool {
		n := 0
		for _, batch := range c.got() {
			n += len(batch)
		}
		return n == keys+1
	}, 30*time.Second)
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Drain returned %v, want context.Canceled", err)
	}
	// 300 keys pending at once are taken 128 at a time, in line order.
	var sizes []int
	var order []string
	for _, batch := range c.got() {
		sizes = append(sizes, len(batch))
		for _, s := range batch {
			order = append(order, s.Key)
		}
	}
	if diff := cmp.Diff([]int{1, 128, 128, 44}, sizes); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
	for i, key := range order {
		if want := fmt.Sprint("ns/k", i); key != want {
			t.Fatalf("key %d delivered is %s, want %s: keys are served in line order", i, key, want)
		}
	}
}

// sealThenConsumeTwo seals b, then consumes two keys one at a time, and returns HasSynced
// after each step.
func sealThenConsumeTwo(b *queue.Backlog[*corev1.ConfigMap], c *consumer) map[string]bool {
	b.Seal()
	sealed := b.HasSynced()
	b.Consume(c, 1)
	one := b.HasSynced()
	b.Consume(c, 1)
	return map[string]bool{"sealed": sealed, "one delivered": one, "both delivered": b.HasSynced()}
}

func TestBacklogSyncsOnceSealedAndEveryMarkedKeyIsDelivered(t *testing.T) {
	tests := []struct {
		name string
		// run drives the backlog and returns HasSynced after each step it names.
		run  func(b *queue.Backlog[*corev1.ConfigMap], c *consumer) map[string]bool
		want map[string]bool
	}{{
		name: "sealed with nothing pushed",
		run: func(b *queue.Backlog[*corev1.ConfigMap], c *consumer) map[string]bool {
			before := b.HasSynced()
			b.Seal()
			return map[string]bool{"before seal": before, "after seal": b.HasSynced()}
		},
		want: map[string]bool{"before seal": false, "after seal": true},
	}, {
		name: "marked keys",
		run: func(b *queue.Backlog[*corev1.ConfigMap], c *consumer) map[string]bool {
			push(b, "a", "1", event.Added)
			push(b, "b", "2", event.Added)
			return sealThenConsumeTwo(b, c)
		},
		want: map[string]bool{"sealed": false, "one delivered": false, "both delivered": true},
	}, {
		name: "keys pushed after the seal do not hold it up",
		run: func(b *queue.Backlog[*corev1.ConfigMap], c *consumer) map[string]bool {
			push(b, "a", "1", event.Added)
			b.Seal()
			push(b, "b", "2", event.Added)
			b.Consume(c, 1)
			return map[string]bool{"initial key delivered": b.HasSynced()}
		},
		want: map[string]bool{"initial key delivered": true},
	}, {
		name: "a marked key that cancels out",
		run: func(b *queue.Backlog[*corev1.ConfigMap], c *consumer) map[string]bool {
			push(b, "a", "1", event.Added)
			push(b, "a", "2", event.Deleted)
			b.Seal()
			return map[string]bool{"sealed": b.HasSynced()}
		},
		want: map[string]bool{"sealed": true},
	}, {
		name: "keys pushed by Update",
		run: func(b *queue.Backlog[*corev1.ConfigMap], c *consumer) map[string]bool {
			b.Update(func(p queue.Pending[*corev1.ConfigMap]) {
				p.Push(ev{Type: event.Added, Key: "ns/a", Object: cm("a", "1")})
				p.Push(ev{Type: event.Added, Key: "ns/b", Object: cm("b", "2")})
			})
			return sealThenConsumeTwo(b, c)
		},
		want: map[string]bool{"sealed": false, "one delivered": false, "both delivered": true},
	}, {
		name: "keys pushed by Update after the seal do not hold it up",
		run: func(b *queue.Backlog[*corev1.ConfigMap], c *consumer) map[string]bool {
			push(b, "a", "1", event.Added)
			b.Seal()
			b.Update(func(p queue.Pending[*corev1.ConfigMap]) {
				p.Push(ev{Type: event.Added, Key: "ns/b", Object: cm("b", "2")})
			})
			b.Consume(c, 1)
			return map[string]bool{"initial key delivered": b.HasSynced()}
		},
		want: map[string]bool{"initial key delivered": true},
	}, {
		name: "sealing twice",
		run: func(b *queue.Backlog[*corev1.ConfigMap], c *consumer) map[string]bool {
			b.Seal()
			b.Seal()
			return map[string]bool{"sealed twice": b.HasSynced()}
		},
		want: map[string]bool{"sealed twice": true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{OnSynced: func() { calls.Add(1) }})
			got := tt.run(b, &consumer{})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("HasSynced (-want +got):\n%s", diff)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("OnSynced called %d times, want once", n)
			}
		})
	}
}

// TestCallbacksRunWithNothingLocked: every callback calls back into the backlog, which
// would deadlock if the backlog's lock were held.
func TestCallbacksRunWithNothingLocked(t *testing.T) {
	var b *queue.Backlog[*corev1.ConfigMap]
	var depths []int
	var synced int
	b = queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{
		OnSynced: func() {
			synced++
			push(b, "from-onsynced", "9", event.Added)
		},
		Depth: func(n int) {
			depths = append(depths, n)
			_ = b.Len()
		},
	})
	c := &consumer{applyErrs: []error{fmt.Errorf("reported")}}
	c.onDeliver = func(batch []ev) {
		if batch[0].Key == "ns/a" {
			push(b, "from-deliver", "8", event.Added)
		}
	}
	c.onReport = func([]error) { b.Between(func() { _ = b.Len() }) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		push(b, "a", "1", event.Added)
		b.Seal()
		for b.Consume(c, 1) > 0 {
		}
	}()
	testwait.Receive(t, done, "the backlog to be consumed with callbacks calling back", 30*time.Second)
	want := [][]step{
		{{Key: "ns/a", Type: event.Added, RV: "1"}},
		{{Key: "ns/from-deliver", Type: event.Added, RV: "8"}},
		{{Key: "ns/from-onsynced", Type: event.Added, RV: "9"}},
	}
	if diff := cmp.Diff(want, c.got()); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
	if synced != 1 {
		t.Errorf("OnSynced called %d times, want once", synced)
	}
	if len(c.errs) != 1 {
		t.Errorf("Report got %v, want the one error Apply returned", c.errs)
	}
	if len(depths) == 0 || depths[len(depths)-1] != 0 {
		t.Errorf("depths reported %v, want the last to be 0", depths)
	}
}

func TestBetweenWaitsForTheBatchAndHoldsOffTheNext(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
	delivering, release := make(chan struct{}), make(chan struct{})
	c := &consumer{}
	var once sync.Once
	c.onDeliver = func([]ev) { once.Do(func() { close(delivering); <-release }) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	push(b, "a", "1", event.Added)
	go func() { done <- b.Drain(ctx, c) }()
	testwait.Receive(t, delivering, "a's delivery", 30*time.Second)

	inFn, releaseFn, between := make(chan [][]step, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(between)
		b.Between(func() {
			inFn <- c.got()
			<-releaseFn
		})
	}()
	testwait.Eventually(t, "Between to wait for a's batch", func() bool { return queue.Pauses(b) == 1 }, 30*time.Second)
	push(b, "b", "2", event.Added) // pending while Between waits: not delivered before fn ends
	close(release)
	want := [][]step{{{Key: "ns/a", Type: event.Added, RV: "1"}}}
	if diff := cmp.Diff(want, testwait.Receive(t, inFn, "Between's function", 30*time.Second)); diff != "" {
		t.Errorf("delivered when Between's function runs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, c.got()); diff != "" {
		t.Errorf("delivered while Between's function runs (-want +got):\n%s", diff)
	}
	close(releaseFn)
	<-between
	testwait.Eventually(t, "b delivered after Between", func() bool { return len(c.got()) == 2 }, 30*time.Second)
	cancel()
	<-done
}

func TestCloseEndsDrainAndClearDropsWhatIsPending(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
	push(b, "a", "1", event.Added)
	push(b, "b", "1", event.Added)
	b.Seal()
	b.Close()
	c := &consumer{}
	if err := b.Drain(context.Background(), c); err != queue.ErrClosed {
		t.Errorf("Drain of a closed backlog returned %v, want ErrClosed", err)
	}
	if got := c.got(); len(got) != 0 {
		t.Errorf("a closed backlog delivered %v", got)
	}
	b.Clear()
	if n := b.Len(); n != 0 {
		t.Errorf("Len() = %d after Clear, want 0", n)
	}
	if b.HasSynced() {
		t.Error("marked keys dropped by Clear made the backlog synced")
	}
}

// TestDepthEndsAtTheCurrentDepthWhenChangesRace: goroutines push while the drain loop
// consumes; once both stop, the last depth reported is the current one, and no report
// went backwards in time (checked through Depth's serialisation: calls never overlap).
func TestDepthEndsAtTheCurrentDepthWhenChangesRace(t *testing.T) {
	defer goleak.VerifyNone(t)
	var last atomic.Int64
	var inCall atomic.Bool
	var overlapped atomic.Bool
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{Depth: func(n int) {
		if !inCall.CompareAndSwap(false, true) {
			overlapped.Store(true)
		}
		last.Store(int64(n))
		inCall.Store(false)
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	c := &consumer{}
	go func() { done <- b.Drain(ctx, c) }()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				push(b, fmt.Sprint(g, "-", i%50), fmt.Sprint(i), event.Modified)
			}
		}()
	}
	wg.Wait()
	testwait.Eventually(t, "the backlog drained", func() bool { return b.Len() == 0 }, 30*time.Second)
	cancel()
	<-done
	if n := last.Load(); n != 0 {
		t.Errorf("last depth reported %d, want 0", n)
	}
	if overlapped.Load() {
		t.Error("Depth calls overlapped")
	}
	// With no more changes, what is pushed is reported once sorted by key.
	push(b, "x", "1", event.Added)
	if n := b.Len(); n != 1 {
		t.Errorf("Len() after one push to an empty backlog = %d, want 1", n)
	}
	if n := last.Load(); n != 1 {
		t.Errorf("depth after one push to an empty backlog = %d, want 1", n)
	}
}

// TestDrainNeverParksWithEventsPending races the drain loop's start against pushes and a
// Seal that sorts them into the FIFO: whichever comes first, every pushed key is
// delivered and the backlog syncs. (A drain loop that looked at the inbox after the sort
// emptied it, and at the FIFO before the sort filled it, once parked for good.)
func TestDrainNeverParksWithEventsPending(t *testing.T) {
	defer goleak.VerifyNone(t)
	for i := range 300 {
		b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
		c := &consumer{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Drain(ctx, c) }()
		b.PushBatch([]ev{
			{Type: event.Added, Key: "ns/a", Object: cm("a", "1")},
			{Type: event.Added, Key: "ns/b", Object: cm("b", "1")},
		})
		b.Seal()
		testwait.Eventually(t, fmt.Sprintf("iteration %d: the backlog to sync", i), b.HasSynced, 30*time.Second)
		cancel()
		<-done
	}
}

// TestPushesWithNoDrainKeepMemoryBoundedByKeys keeps DESIGN 4 with the inbox: while
// nothing drains the backlog (the drain loop held off, or not started), 100,000 pushes
// over 3 keys hold at most an inbox's worth of events besides one pending entry per key.
func TestPushesWithNoDrainKeepMemoryBoundedByKeys(t *testing.T) {
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
	most := 0
	for i := range 100_000 {
		push(b, fmt.Sprint("k", i%3), fmt.Sprint(i+1), event.Modified)
		most = max(most, queue.InboxLen(b))
	}
	if most > queue.MaxInbox {
		t.Errorf("the inbox held %d events, more than %d", most, queue.MaxInbox)
	}
	if n := b.Len(); n != 3 {
		t.Errorf("Len() = %d after pushes over 3 keys, want 3", n)
	}
	c := &consumer{}
	b.Consume(c, math.MaxInt)
	want := [][]step{{
		{Key: "ns/k0", Type: event.Modified, RV: "100000"},
		{Key: "ns/k1", Type: event.Modified, RV: "99998"},
		{Key: "ns/k2", Type: event.Modified, RV: "99999"},
	}}
	if diff := cmp.Diff(want, c.got()); diff != "" {
		t.Errorf("what the pushes left (-want +got):\n%s", diff)
	}
}

// Update's function sees every event pushed before it, sorted by key and compressed, and
// its pushes join them under the same rules.
func TestUpdateSeesEveryPushedEventAndPushesUnderTheSameRules(t *testing.T) {
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
	push(b, "a", "1", event.Added)
	push(b, "b", "2", event.Added)
	push(b, "a", "3", event.Modified)
	type seen struct {
		Len    int
		Line   []string
		EventA []string
		None   bool
	}
	var got seen
	b.Update(func(p queue.Pending[*corev1.ConfigMap]) {
		p.Push(ev{Type: event.Modified, Key: "ns/b", Object: cm("b", "4")}) // merges into b's addition
		p.Push(ev{Type: event.Added, Key: "ns/c", Object: cm("c", "5")})
		got.Len = p.Len()
		p.Range(func(key string, events []ev) bool {
			got.Line = append(got.Line, fmt.Sprintf("%s:%d", key, len(events)))
			return true
		})
		for _, e := range p.Events("ns/a") {
			got.EventA = append(got.EventA, fmt.Sprintf("%s %s", e.Type, e.Object.ResourceVersion))
		}
		got.None = p.Events("ns/z") == nil
	})
	want := seen{Len: 3, Line: []string{"ns/a:1", "ns/b:1", "ns/c:1"}, EventA: []string{"ADDED 3"}, None: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Update saw (-want +got):\n%s", diff)
	}
	c := &consumer{}
	for b.Consume(c, 1) > 0 {
	}
	wantSteps := [][]step{{{"ns/a", event.Added, "3"}}, {{"ns/b", event.Added, "4"}}, {{"ns/c", event.Added, "5"}}}
	if diff := cmp.Diff(wantSteps, c.got()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}
