package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
)

func TestKeyFuncAndTransformShapeTheCache(t *testing.T) {
	src := fake.New[obj, list](cm("ns1", "a", map[string]string{"big": "label"}), cm("ns2", "b", nil))
	c := controller.New[obj, list](src,
		controller.WithKeyFunc(func(o obj) (string, error) {
			if o == nil || o.Name == "" {
				return "", event.ErrNoName
			}
			return "cm:" + o.Name, nil
		}),
		controller.WithTransform(func(o obj) (obj, error) {
			o.Labels = nil
			return o, nil
		}))
	h := newRecorder()
	mustAdd(t, c, "h", h)
	run(t, c)
	h.waitFor(t, 2)
	if diff := cmp.Diff([]string{"cm:a", "cm:b"}, c.Store().Keys()); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	a, ok := c.Store().Get("cm:a")
	if !ok {
		t.Fatal("no object under the custom key cm:a")
	}
	if a.Labels != nil {
		t.Errorf("the transform did not run before caching: labels %v", a.Labels)
	}
}

func TestFullHistoryDeliversEveryIntermediateState(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil))
	c := controller.New[obj, list](src, controller.WithFullHistory())
	release := make(chan struct{})
	h := newRecorder()
	h.hook = func(event.Event[obj]) { <-release }
	mustAdd(t, c, "h", h)
	run(t, c)
	_ = src.WaitForWatchers(context.Background(), 1)
	want := []seen{{Type: event.Added, Key: "ns/a", RV: "1", Sync: true}}
	for i := 0; i < 5; i++ {
		o, _ := src.Get("ns", "a")
		prior := o.ResourceVersion
		o.Data = map[string]string{"i": fmt.Sprint(i)}
		updated, err := src.Update(o)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, seen{Type: event.Modified, Key: "ns/a", RV: updated.ResourceVersion, PriorRV: prior})
	}
	// Everything has reached the cache before the handler moves on from its first event.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return c.LastSyncResourceVersion() == want[5].RV, nil }); err != nil {
		t.Fatal(err)
	}
	close(release)
	if diff := cmp.Diff(want, h.waitFor(t, len(want))); diff != "" {
		t.Errorf("a handler behind by 5 changes saw (-want +got):\n%s", diff)
	}
}

func TestResyncRedeliversKnownObjectsEveryPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil))
	c := controller.New[obj, list](src, controller.WithClock(clk), controller.WithResyncPeriod(time.Minute))
	h := newRecorder()
	mustAdd(t, c, "h", h)
	run(t, c)
	h.waitFor(t, 2)
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return clk.HasWaiters(), nil }); err != nil {
		t.Fatal(err)
	}
	if got := h.events(); len(got) != 2 {
		t.Fatalf("events before the period elapsed: %+v", got)
	}
	clk.Step(time.Minute)
	got := h.waitFor(t, 4)[2:]
	sort.Slice(got, func(i, j int) bool { return got[i].Key < got[j].Key })
	want := []seen{
		{Type: event.Modified, Key: "ns/a", RV: "1", PriorRV: "1", Sync: true},
		{Type: event.Modified, Key: "ns/b", RV: "2", PriorRV: "2", Sync: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resync delivered (-want +got):\n%s", diff)
	}
}

func TestOptionOfAnotherObjectTypePanicsInNew(t *testing.T) {
	defer func() {
		msg := fmt.Sprint(recover())
		if !strings.Contains(msg, "WithIndex(owner)") || !strings.Contains(msg, "v1.Secret") || !strings.Contains(msg, "v1.ConfigMap") {
			t.Errorf("New panicked with %q, want a message naming the option and both types", msg)
		}
	}()
	controller.New[obj, list](fake.New[obj, list](),
		controller.WithIndex("owner", func(*corev1.Secret) ([]string, error) { return nil, nil }))
	t.Error("New accepted an index function of another object type")
}

func TestErrorHandlerMayAddAHandler(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil))
	var c *controller.Controller[obj, list]
	var once sync.Once
	added := make(chan *controller.Registration, 1)
	c = controller.New[obj, list](src,
		controller.WithIndex("fails", func(obj) ([]string, error) { return nil, errors.New("no values") }),
		controller.WithErrorHandler(func(context.Context, error) {
			// Index errors are reported from the drain loop, which adding a handler
			// pauses: that must not deadlock.
			once.Do(func() {
				reg, err := c.AddHandler("added-on-error", newRecorder())
				if err != nil {
					t.Error(err)
				}
				added <- reg
			})
		}))
	run(t, c)
	select {
	case reg := <-added:
		<-reg.Synced()
	case <-time.After(30 * time.Second):
		t.Fatal("the error handler could not add a handler")
	}
}
