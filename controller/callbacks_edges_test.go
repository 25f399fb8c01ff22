package controller_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

// panickingMetrics panics in every method: a user's adapter with a bug.
type panickingMetrics struct{}

func (panickingMetrics) Listed(string, int, time.Duration)            { panic("Listed") }
func (panickingMetrics) WatchEvent(string, watch.EventType)           { panic("WatchEvent") }
func (panickingMetrics) ResourceVersion(string, string)               { panic("ResourceVersion") }
func (panickingMetrics) ListWatchError(string)                        { panic("ListWatchError") }
func (panickingMetrics) EventQueueDepth(string, int)                  { panic("EventQueueDepth") }
func (panickingMetrics) HandlerLatency(string, string, time.Duration) { panic("HandlerLatency") }
func (panickingMetrics) HandlerPanic(string, string)                  { panic("HandlerPanic") }

// derefMetrics reads its receiver in every method, as most adapters do: a typed-nil one
// panics when called.
type derefMetrics struct{ n int }

func (m *derefMetrics) Listed(string, int, time.Duration)            { m.n++ }
func (m *derefMetrics) WatchEvent(string, watch.EventType)           { m.n++ }
func (m *derefMetrics) ResourceVersion(string, string)               { m.n++ }
func (m *derefMetrics) ListWatchError(string)                        { m.n++ }
func (m *derefMetrics) EventQueueDepth(string, int)                  { m.n++ }
func (m *derefMetrics) HandlerLatency(string, string, time.Duration) { m.n++ }
func (m *derefMetrics) HandlerPanic(string, string)                  { m.n++ }

// valueMetrics has value receivers: taking a method value of a typed-nil *valueMetrics
// panics.
type valueMetrics struct{}

func (valueMetrics) Listed(string, int, time.Duration)            {}
func (valueMetrics) WatchEvent(string, watch.EventType)           {}
func (valueMetrics) ResourceVersion(string, string)               {}
func (valueMetrics) ListWatchError(string)                        {}
func (valueMetrics) EventQueueDepth(string, int)                  {}
func (valueMetrics) HandlerLatency(string, string, time.Duration) {}
func (valueMetrics) HandlerPanic(string, string)                  {}

// TestUserCallbacksThatPanicAreReportedNeverFatal: the callbacks a Controller calls on its
// own goroutines (Transform, KeyFunc, index functions, Metrics, ListOptions) are user code;
// a panic in one is recovered and reported, never the end of the process (DESIGN 18), and
// an object a Transform or KeyFunc panicked on is skipped as one it failed on. A typed-nil
// Metrics or Clock is none, as a nil one is. Each case ended the test binary before the fix
// (a panic on the reflector's, the consumer's or a handler's goroutine, or in New).
func TestUserCallbacksThatPanicAreReportedNeverFatal(t *testing.T) {
	bad := func(o obj) bool { return o.Name == "bad" }
	tests := []struct {
		name string
		opts controller.Options[obj]
		// handled is the keys the handler must see; wantErr a text the reported errors
		// must include (none for "").
		handled []string
		wantErr string
		// noSync: the controller cannot list at all; the test checks errors are reported
		// and Run returns.
		noSync bool
	}{
		{
			name: "Transform panics on one object",
			opts: controller.Options[obj]{
				Options: reflect.Options[obj]{Transform: func(o obj) (obj, error) {
					if bad(o) {
						panic("transform bug")
					}
					return o, nil
				}},
			},
			handled: []string{"ns/good"},
			wantErr: "transform bug",
		},
		{
			name: "KeyFunc panics on one object",
			opts: controller.Options[obj]{KeyFunc: func(o obj) (string, error) {
				if bad(o) {
					panic("key bug")
				}
				return event.ObjectKey(o)
			}},
			handled: []string{"ns/good"},
			wantErr: "key bug",
		},
		{
			name: "an index function panics on one object",
			opts: controller.Options[obj]{Indexers: eventcache.Indexers[obj]{"byName": func(o obj) ([]string, error) {
				if bad(o) {
					panic("index bug")
				}
				return []string{o.Name}, nil
			}}},
			handled: []string{"ns/bad", "ns/good"},
			wantErr: "index bug",
		},
		{
			name:    "every Metrics method panics",
			opts:    controller.Options[obj]{Metrics: panickingMetrics{}},
			handled: []string{"ns/bad", "ns/good"},
		},
		{
			name:    "a typed-nil Metrics with pointer receivers",
			opts:    controller.Options[obj]{Metrics: (*derefMetrics)(nil)},
			handled: []string{"ns/bad", "ns/good"},
		},
		{
			name:    "a typed-nil Metrics with value receivers",
			opts:    controller.Options[obj]{Metrics: (*valueMetrics)(nil)},
			handled: []string{"ns/bad", "ns/good"},
		},
		{
			name:    "a typed-nil Clock",
			opts:    controller.Options[obj]{Options: reflect.Options[obj]{Clock: (*clocktesting.FakeClock)(nil)}},
			handled: []string{"ns/bad", "ns/good"},
		},
		{
			name:    "ListOptions panics",
			opts:    controller.Options[obj]{Options: reflect.Options[obj]{ListOptions: func(*metav1.ListOptions) { panic("tweak bug") }}},
			wantErr: "tweak bug",
			noSync:  true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			src := fake.New[obj, list](cm("ns", "bad", nil), cm("ns", "good", nil))
			var mu sync.Mutex
			var reported []string
			errSeen := make(chan struct{}, 1)
			opts := tc.opts
			opts.Backoff = wait.Backoff{Duration: time.Millisecond, Steps: 1 << 30, Cap: 10 * time.Millisecond}
			opts.OnError = func(_ context.Context, err error) {
				mu.Lock()
				reported = append(reported, err.Error())
				mu.Unlock()
				select {
				case errSeen <- struct{}{}:
				default:
				}
			}
			c := testctl.New(t, src, opts)
			rec := newRecorder()
			if _, err := c.AddHandler("rec", rec); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			hasErr := func() bool {
				mu.Lock()
				defer mu.Unlock()
				for _, e := range reported {
					if strings.Contains(e, tc.wantErr) {
						return true
					}
				}
				return false
			}
			if !tc.noSync {
				if err := c.WaitForSync(ctx); err != nil {
					t.Fatal(err)
				}
				got := rec.waitFor(t, len(tc.handled))
				var keys []string
				for _, s := range got {
					keys = append(keys, s.Key)
				}
				if strings.Join(keys, ",") != strings.Join(tc.handled, ",") {
					t.Errorf("handled %v, want %v", keys, tc.handled)
				}
			}
			if tc.wantErr != "" {
				eventually(t, "the panic reported through OnError", hasErr)
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v", err)
			}
		})
	}
}
