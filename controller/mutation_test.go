package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
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
// updated, and returned by Run, a reader that changes a Store object is reported by Run when it ends, and
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
		wantRun        []mutationFound // returned by Run: found by writes, then at its end
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
		wantRun:      []mutationFound{{Key: "ns/a", Mentions: true}},
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
			c := testctl.New(t, src, tt.opts)
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

// widget is a custom resource's Go struct written by hand, as this library lets users
// write them (no code generation), with the DeepCopyObject such structs often get: it
// copies the top level and shares everything below it.
type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              widgetSpec `json:"spec"`
}

type widgetSpec struct {
	Replicas *int32            `json:"replicas,omitempty"`
	Ports    []int32           `json:"ports,omitempty"`
	Settings map[string]string `json:"settings,omitempty"`
}

// DeepCopyObject is shallow: the copy shares Replicas, Ports and Settings.
func (w *widget) DeepCopyObject() runtime.Object {
	c := *w
	return &c
}

type widgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []widget `json:"items"`
}

func (l *widgetList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = append([]widget(nil), l.Items...)
	return &c
}

func newWidget(name string) *widget {
	replicas := int32(1)
	return &widget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       widgetSpec{Replicas: &replicas, Ports: []int32{80}, Settings: map[string]string{"mode": "fast"}},
	}
}

// TestTheMutationDetectorSeesBelowAShallowDeepCopy: a custom resource whose
// DeepCopyObject copies only the top level does not hide from the detector a change made
// in place below it, by a handler or a reader, whether the object is updated afterwards
// (found by the write) or not (found when Run ends): Run returns each one.
func TestTheMutationDetectorSeesBelowAShallowDeepCopy(t *testing.T) {
	tests := []struct {
		name string
		// handle changes the object a's handler is handed as an addition.
		handle func(w *widget)
		// read changes a Store object, once the handler has seen a and b.
		read func(store *eventcache.Store[*widget])
		// update updates a in the source afterwards.
		update  bool
		wantRun []mutationFound
	}{{
		name:    "a handler changes a nested map",
		handle:  func(w *widget) { w.Spec.Settings["mode"] = "changed in place" },
		wantRun: []mutationFound{{Key: "ns/a", Mentions: true}},
	}, {
		name:    "a handler changes a nested map, then the object is updated",
		handle:  func(w *widget) { w.Spec.Settings["mode"] = "changed in place" },
		update:  true,
		wantRun: []mutationFound{{Key: "ns/a", Mentions: true}},
	}, {
		name: "a reader changes what a pointer points to",
		read: func(store *eventcache.Store[*widget]) {
			w, _ := store.Get("ns/b")
			*w.Spec.Replicas = 5
		},
		wantRun: []mutationFound{{Key: "ns/b"}},
	}, {
		name: "a reader changes a slice element",
		read: func(store *eventcache.Store[*widget]) {
			w, _ := store.Get("ns/b")
			w.Spec.Ports[0] = 8080
		},
		wantRun: []mutationFound{{Key: "ns/b"}},
	}, {
		name:   "nobody changes anything",
		update: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[*widget, *widgetList](newWidget("a"), newWidget("b"))
			c := testctl.New(t, src, controller.Options[*widget]{Options: reflect.Options[*widget]{OnError: func(context.Context, error) {}}, DetectMutations: true})
			updated := make(chan struct{})
			reg, err := c.AddHandler("h", controller.HandlerFunc[*widget](func(_ context.Context, e event.Event[*widget]) {
				if e.Key != "ns/a" {
					return
				}
				if e.Type == event.Added && tt.handle != nil {
					tt.handle(e.Object)
				}
				if e.Type == event.Modified {
					close(updated)
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			if err := reg.WaitForSync(ctx); err != nil {
				t.Fatal(err)
			}
			if tt.read != nil {
				tt.read(c.Store())
			}
			if tt.update {
				// A fresh object: the fake's copies share what the handler changed.
				w := newWidget("a")
				w.Labels = map[string]string{"updated": "yes"}
				if _, err := src.Update(w); err != nil {
					t.Fatal(err)
				}
				<-updated
			}
			cancel()
			runErr := <-done
			goleak.VerifyNone(t)
			if diff := cmp.Diff(tt.wantRun, mutationsIn(runErr)); diff != "" {
				t.Errorf("mutations Run returned (-want +got):\n%s\nRun: %v", diff, runErr)
			}
		})
	}
}

// TestOnMutationSeesEachMutationOnceAsItIsFound: OnMutation is called once for each
// mutation, with its key and diff: the one a write finds while the controller runs (a
// handler changed a, which is then updated) before Run ends, and the one Run's final
// check finds (a reader changed b); Run still returns both. A panic in it is recovered
// and logged through the context's logger. With the detector off it is not called.
func TestOnMutationSeesEachMutationOnceAsItIsFound(t *testing.T) {
	tests := []struct {
		name      string
		detect    bool
		panics    bool
		wantHook  []mutationFound
		wantRun   []mutationFound
		wantPanic bool // logged
	}{{
		name:     "the detector on",
		detect:   true,
		wantHook: []mutationFound{{Key: "ns/a", Mentions: true}, {Key: "ns/b", Mentions: true}},
		wantRun:  []mutationFound{{Key: "ns/a", Mentions: true}, {Key: "ns/b", Mentions: true}},
	}, {
		name:      "a hook that panics",
		detect:    true,
		panics:    true,
		wantHook:  []mutationFound{{Key: "ns/a", Mentions: true}, {Key: "ns/b", Mentions: true}},
		wantRun:   []mutationFound{{Key: "ns/a", Mentions: true}, {Key: "ns/b", Mentions: true}},
		wantPanic: true,
	}, {
		name: "the detector off",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(controller.MutationDetectorEnv, "")
			var mu sync.Mutex
			var hooked []mutationFound
			var beforeRunEnded []string // keys the hook saw while Run was running
			running := true
			hookedA := make(chan struct{})
			opts := controller.Options[obj]{
				Options:         reflect.Options[obj]{OnError: func(context.Context, error) {}},
				DetectMutations: tt.detect,
				OnMutation: func(_ context.Context, m *eventcache.MutationError) {
					mu.Lock()
					hooked = append(hooked, mutationFound{Key: m.Key, Mentions: strings.Contains(m.Diff, "changed in place")})
					if running {
						beforeRunEnded = append(beforeRunEnded, m.Key)
						if m.Key == "ns/a" {
							close(hookedA)
						}
					}
					mu.Unlock()
					if tt.panics {
						panic("hook fails")
					}
				},
			}
			src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil))
			c := testctl.New(t, src, opts)
			updated := make(chan struct{})
			reg := mustAdd(t, c, "h", controller.HandlerFunc[obj](func(_ context.Context, e event.Event[obj]) {
				switch {
				case e.Key == "ns/a" && e.Type == event.Added:
					e.Object.Data = map[string]string{"note": "changed in place"}
				case e.Key == "ns/a" && e.Type == event.Modified:
					close(updated)
				}
			}))
			logs := &logLines{}
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.logger()))
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			if err := reg.WaitForSync(ctx); err != nil {
				t.Fatal(err)
			}
			b, _ := c.Store().Get("ns/b")
			b.Data = map[string]string{"note": "changed in place"}
			a, _ := src.Get("ns", "a")
			a.Labels = map[string]string{"updated": "yes"}
			if _, err := src.Update(a); err != nil {
				t.Fatal(err)
			}
			<-updated
			if tt.detect {
				// The write that found a's mutation reports it once its batch is delivered:
				// OnMutation is called while the controller runs.
				select {
				case <-hookedA:
				case <-time.After(10 * time.Second):
					t.Fatal("OnMutation not called for a while the controller runs")
				}
			}
			mu.Lock()
			if diff := cmp.Diff(keysOf(tt.wantHook[:min(1, len(tt.wantHook))]), beforeRunEnded); diff != "" {
				t.Errorf("keys OnMutation saw while Run ran (-want +got):\n%s", diff)
			}
			running = false
			mu.Unlock()
			cancel()
			runErr := <-done
			goleak.VerifyNone(t)
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tt.wantHook, hooked); diff != "" {
				t.Errorf("OnMutation calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRun, mutationsIn(runErr)); diff != "" {
				t.Errorf("mutations Run returned (-want +got):\n%s", diff)
			}
			var panicked []string
			for _, l := range logs.all() {
				if l["msg"] == "OnMutation panicked" {
					panicked = append(panicked, fmt.Sprint(l["key"]))
				}
			}
			var wantPanicked []string
			if tt.wantPanic {
				wantPanicked = keysOf(tt.wantHook)
			}
			if diff := cmp.Diff(wantPanicked, panicked); diff != "" {
				t.Errorf("keys of the logged OnMutation panics (-want +got):\n%s", diff)
			}
		})
	}
}

func keysOf(found []mutationFound) []string {
	var keys []string
	for _, f := range found {
		keys = append(keys, f.Key)
	}
	return keys
}
