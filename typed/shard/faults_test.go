package shard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// bufferedContext returns a context whose logger keeps what it logs, and the buffer.
func bufferedContext(t *testing.T) (context.Context, interface{ String() string }) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	return klog.NewContext(t.Context(), logger), logger.GetSink().(ktesting.Underlier).GetBuffer()
}

// nothingLeases answers every read and write with neither a Lease nor an error.
type nothingLeases struct {
	coordinationclient.LeasesGetter
}

func (n nothingLeases) Leases(ns string) coordinationclient.LeaseInterface {
	return nothingLease{n.LeasesGetter.Leases(ns)}
}

type nothingLease struct {
	coordinationclient.LeaseInterface
}

func (nothingLease) Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error) {
	return nil, nil
}

func (nothingLease) Create(context.Context, *coordinationv1.Lease, metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return nil, nil
}

func (nothingLease) Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return nil, nil
}

func (nothingLease) List(context.Context, metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	return nil, nil
}

func TestALeaseClientReturningNothingIsAnErrorNeverAPanic(t *testing.T) {
	s, err := shard.New(shard.Options{
		Client: nothingLeases{leasefake.NewServer().CoordinationV1()}, Namespace: "default", Name: "g", Identity: "a",
		Space: shard.Space{Shards: 2}, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, logs := bufferedContext(t)
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.Run(ctx, func(ctx context.Context, sh shard.Shard) {
		t.Errorf("shard %d worked on with no Lease", sh.Index)
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), guard.ErrNoLease.Error()) {
		t.Errorf("no error saying the client returned nothing was logged:\n%s", logs)
	}
	// The elector, on its own, gets the same guard.
	ctx, cancel = context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	le := leaderelection.Config{Client: nothingLeases{leasefake.NewServer().CoordinationV1()}, Namespace: "default", Name: "l", Identity: "a",
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	if err := le.Run(ctx, func(context.Context) { t.Error("led with no Lease") }); err != nil {
		t.Fatal(err)
	}
}

// panickingMetrics panics in every call; calls counts them.
type panickingMetrics struct{ calls atomic.Int64 }

func (m *panickingMetrics) panic(what string) { m.calls.Add(1); panic(what) }

func (m *panickingMetrics) ShardsHeld(string, int)                 { m.panic("ShardsHeld") }
func (m *panickingMetrics) ShardMoved(string, int, bool)           { m.panic("ShardMoved") }
func (m *panickingMetrics) HandOver(string, int, time.Duration)    { m.panic("HandOver") }
func (m *panickingMetrics) ShardObjects(string, int, int)          { m.panic("ShardObjects") }
func (m *panickingMetrics) ShardKeys(string, int, int)             { m.panic("ShardKeys") }
func (m *panickingMetrics) QueueDepth(string, int)                 { m.panic("QueueDepth") }
func (m *panickingMetrics) Retry(string)                           { m.panic("Retry") }
func (m *panickingMetrics) ReconcileLatency(string, time.Duration) { m.panic("ReconcileLatency") }
func (m *panickingMetrics) ReconcileError(string, bool)            { m.panic("ReconcileError") }

// nilReceiverMetrics counts the calls made on a typed-nil *nilReceiverMetrics.
type nilReceiverMetrics struct{}

var nilReceiverCalls atomic.Int64

func (*nilReceiverMetrics) QueueDepth(string, int)                 { nilReceiverCalls.Add(1) }
func (*nilReceiverMetrics) Retry(string)                           { nilReceiverCalls.Add(1) }
func (*nilReceiverMetrics) ReconcileLatency(string, time.Duration) { nilReceiverCalls.Add(1) }
func (*nilReceiverMetrics) ReconcileError(string, bool)            { nilReceiverCalls.Add(1) }

func TestPanickingAndTypedNilMetricsLeaveEveryKeyReconciledAndTheReconcilesUnfailed(t *testing.T) {
	const objects = 20
	var objs []runtime.Object
	for i := range objects {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%d", i), UID: uuid.NewUUID()}})
	}
	cluster := fake.NewClientset(objs...)
	m := &panickingMetrics{}
	s, err := shard.New(shard.Options{
		Client: leasefake.NewServer().CoordinationV1(), Namespace: "default", Name: "g", Identity: "a", Space: shard.Space{Shards: 4},
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond, Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reconciled := map[string]int{}
	var reported []string
	var typedNil *nilReceiverMetrics
	loop, err := shard.NewLoop(runManager(t), s, configMapSource(cluster), typed.ReconcilerFunc[*corev1.ConfigMap](
		func(_ context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			mu.Lock()
			reconciled[req.Key]++
			mu.Unlock()
			return typed.Result{}, nil
		}), typed.Options{Metrics: typedNil, OnError: func(_ context.Context, key string, err error) {
		mu.Lock()
		reported = append(reported, key+": "+err.Error())
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, logCtx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(logCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := loop.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, "every key reconciled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reconciled) == objects
	})
	time.Sleep(200 * time.Millisecond) // room for retries of reconciles failed by a panic
	cancel()
	<-done
	want := map[string]int{}
	for i := range objects {
		want[fmt.Sprintf("default/cm-%d", i)] = 1
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, reconciled); diff != "" {
		t.Errorf("reconciles per key (-want +got):\n%s", diff)
	}
	if len(reported) != 0 {
		t.Errorf("reconcile errors reported: %v", reported)
	}
	if m.calls.Load() == 0 {
		t.Error("the Sharder's metrics were never called")
	}
	if n := nilReceiverCalls.Load(); n != 0 {
		t.Errorf("a typed-nil typed.Options.Metrics was called %d times, want none", n)
	}
}
