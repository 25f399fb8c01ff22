package typed_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

// workMetrics records the WorkMetrics calls of a loop, and is a typed.Metrics.
type workMetrics struct {
	mu       sync.Mutex
	workers  int
	queued   int
	started  int
	done     int
	inFlight map[time.Time]int
	waited   []time.Duration
	outcomes map[typed.Outcome]int
	retries  int
}

func (m *workMetrics) QueueDepth(string, int)                 {}
func (m *workMetrics) Retry(string)                           { m.mu.Lock(); m.retries++; m.mu.Unlock() }
func (m *workMetrics) ReconcileLatency(string, time.Duration) {}
func (m *workMetrics) ReconcileError(string, bool)            {}
func (m *workMetrics) Workers(_ string, n int)                { m.mu.Lock(); m.workers = n; m.mu.Unlock() }
func (m *workMetrics) KeysQueued(_ string, n int)             { m.mu.Lock(); m.queued += n; m.mu.Unlock() }
func (m *workMetrics) WorkStarted(_ string, waited time.Duration, start time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.started++
	m.inFlight[start]++
	m.waited = append(m.waited, waited)
}
func (m *workMetrics) WorkDone(_ string, start time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.done++
	if m.inFlight[start]--; m.inFlight[start] == 0 {
		delete(m.inFlight, start)
	}
}
func (m *workMetrics) Reconciled(_ string, o typed.Outcome) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outcomes[o]++
}

// A Loop whose Metrics is also WorkMetrics reports its workers, each key queued, each
// key's wait and work (every start matched by a done with the same start), and each
// reconcile's outcome: success, requeue after, error (retried), terminal error, panic.
func TestWorkMetricsReportQueueWorkAndOutcomes(t *testing.T) {
	src := fake.New[obj, list](cm("ok", "1"), cm("flaky", "1"), cm("later", "1"), cm("invalid", "1"), cm("panics", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	m := &workMetrics{inFlight: map[time.Time]int{}, outcomes: map[typed.Outcome]int{}}
	var mu sync.Mutex
	attempts := map[string]int{}
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		mu.Lock()
		attempts[req.Name]++
		n := attempts[req.Name]
		mu.Unlock()
		switch {
		case req.Name == "flaky" && n == 1:
			return typed.Result{}, errors.New("try again")
		case req.Name == "later" && n == 1:
			return typed.Result{RequeueAfter: time.Millisecond}, nil
		case req.Name == "invalid":
			return typed.Result{}, typed.Terminal(errors.New("invalid"))
		case req.Name == "panics" && n == 1:
			panic("boom")
		}
		return typed.Result{}, nil
	}), typed.Options{Workers: 3, RateLimiter: fastRetries, Metrics: m, OnError: func(context.Context, string, error) {}})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(klog.NewContext(context.Background(), klog.Background()), t, src, c, l)
	want := map[typed.Outcome]int{typed.Succeeded: 4, typed.RequeuedAfter: 1, typed.Failed: 1, typed.FailedTerminal: 1, typed.Panicked: 1}
	eventually(t, "every outcome reported", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for o, n := range want {
			if m.outcomes[o] != n {
				return false
			}
		}
		return m.done == 8 && m.queued == 8
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.workers != 3 {
		t.Errorf("Workers reported %d, want 3", m.workers)
	}
	// 5 keys listed, and 3 queued again (a retry, a requeue, a retry after the panic).
	if m.queued != 8 || m.started != 8 || m.done != 8 || len(m.inFlight) != 0 {
		t.Errorf("queued %d, started %d, done %d, in flight %v; want 8, 8, 8 and none", m.queued, m.started, m.done, m.inFlight)
	}
	if m.retries != 2 {
		t.Errorf("retries %d, want 2 (the error and the panic)", m.retries)
	}
	for _, w := range m.waited {
		if w < 0 || w > time.Minute {
			t.Errorf("a key waited %v: not a wait since it was queued", w)
		}
	}
}

func TestOutcomeNames(t *testing.T) {
	for o, want := range map[typed.Outcome]string{typed.Succeeded: "success", typed.RequeuedAfter: "requeue_after",
		typed.Failed: "error", typed.FailedTerminal: "terminal_error", typed.Panicked: "panic", typed.Interrupted: "interrupted", 42: "Outcome(42)"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", o, got, want)
		}
	}
}
