package controller_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
)

// mutationFound is what a test compares of a MutationError.
type mutationFound struct {
	Key      string
	Mentions bool // the diff shows the changed value
}

func mutationsIn(err error) []mutationFound {
	var out []mutationFound
	var walk func(error)
	walk = func(err error) {
		var m *eventcache.MutationError
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				walk(e)
			}
			return
		}
		if errors.As(err, &m) {
			out = append(out, mutationFound{Key: m.Key, Mentions: strings.Contains(m.Diff, "changed in place")})
		}
	}
	walk(err)
	return out
}

// TestTheMutationDetectorFindsCachedObjectsChangedInPlace: with the detector on, a
// handler that changes the object it was handed is reported when the object is next
// updated, a reader that changes a Store object is reported by Run when it ends, and
// nothing is reported when nobody changes anything or the detector is off.
func TestTheMutationDetectorFindsCachedObjectsChangedInPlace(t *testing.T) {
	tests := []struct {
		name string
		opts controller.Options[obj]
		env  string
		// mutate runs once the handler has seen a and b; it may change cached objects.
		mutate         func(c *controller.Controller[obj, list], src *fake.ListerWatcher[obj, list])
		handlerMutates bool
		wantReported   []mutationFound // through OnError while running
		wantRun        []mutationFound // returned by Run
	}{{
		name:           "a handler changes the object it is handed, which is then updated",
		opts:           controller.Options[obj]{DetectMutations: true},
		handlerMutates: true,
		mutate: func(_ *controller.Controller[obj, list], src *fake.ListerWatcher[obj, list]) {
			o, _ := src.Get("ns", "a")
			o.Labels = map[string]string{"updated": "yes"}
			_, _ = src.Update(o)
		},
		wantReported: []mutationFound{{Key: "ns/a", Mentions: true}},
	}, {
		name: "a reader changes a Store object",
		opts: controller.Options[obj]{DetectMutations: true},
		mutate: func(c *controller.Controller[obj, list], _ *fake.ListerWatcher[obj, list]) {
			o, _ := c.Store().Get("ns/b")
			o.Data = map[string]string{"note": "changed in place"}
		},
		wantReported: []mutationFound{{Key: "ns/b", Mentions: true}},
		wantRun:      []mutationFound{{Key: "ns/b", Mentions: true}},
	}, {
		name: "turned on by the environment",
		env:  "true",
		mutate: func(c *controller.Controller[obj, list], _ *fake.ListerWatcher[obj, list]) {
			o, _ := c.Store().Get("ns/b")
			o.Data = map[string]string{"note": "changed in place"}
		},
		wantReported: []mutationFound{{Key: "ns/b", Mentions: true}},
		wantRun:      []mutationFound{{Key: "ns/b", Mentions: true}},
	}, {
		name:   "nobody changes anything",
		opts:   controller.Options[obj]{DetectMutations: true},
		mutate: func(*controller.Controller[obj, list], *fake.ListerWatcher[obj, list]) {},
	}, {
		name: "the detector is off",
		mutate: func(c *controller.Controller[obj, list], _ *fake.ListerWatcher[obj, list]) {
			o, _ := c.Store().Get("ns/b")
			o.Data = map[string]string{"note": "changed in place"}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(controller.MutationDetectorEnv, tt.env)
			var mu sync.Mutex
			var reported []error
			tt.opts.OnError = func(_ context.Context, err error) {
				mu.Lock()
				reported = append(reported, err)
				mu.Unlock()
			}
			src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil))
			c := controller.New(src, tt.opts)
			updated := make(chan struct{})
			h := controller.HandlerFunc[obj](func(_ context.Context, e event.Event[obj]) {
				if e.Key != "ns/a" {
					return
				}
				if e.Type == event.Added && tt.handlerMutates {
					e.Object.Data = map[string]string{"note": "changed in place"}
				}
				if e.Type == event.Modified {
					close(updated)
				}
			})
			reg := mustAdd(t, c, "h", h)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			if err := reg.WaitForSync(ctx); err != nil {
				t.Fatal(err)
			}
			tt.mutate(c, src)
			if tt.handlerMutates {
				<-updated
			}
			cancel()
			runErr := <-done
			goleak.VerifyNone(t)
			if diff := cmp.Diff(tt.wantRun, mutationsIn(runErr)); diff != "" {
				t.Errorf("mutations Run returned (-want +got):\n%s", diff)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tt.wantReported, mutationsIn(errors.Join(reported...))); diff != "" {
				t.Errorf("mutations reported (-want +got):\n%s", diff)
			}
		})
	}
}
