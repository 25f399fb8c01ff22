package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
)

func TestHandlersReceiveTheKeyTheControllerComputed(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil))
	custom := func(o obj) (string, error) { return "custom:" + o.Name, nil }
	c := testctl.New(t, src, controller.Options[obj]{KeyFunc: custom})
	early, late := newKeyRecorder(), newKeyRecorder()
	earlyReg := mustAdd(t, c, "early", early)
	run(t, c)
	lateReg := mustAdd(t, c, "late", late) // gets the current state through the hand-over path
	// Changes made before a handler has handled its initial state would merge into it.
	for _, reg := range []*controller.Registration{earlyReg, lateReg} {
		if err := reg.WaitForSync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	_ = src.WaitForWatchers(context.Background(), 1)
	if _, err := src.Create(cm("ns", "b", nil)); err != nil {
		t.Fatal(err)
	}
	a, _ := src.Get("ns", "a")
	a.Labels = map[string]string{"changed": "yes"}
	if _, err := src.Update(a); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Delete("ns", "a"); err != nil {
		t.Fatal(err)
	}
	for handler, r := range map[string]*keyRecorder{"early": early, "late": late} {
		got := r.waitFor(t, "custom:a DELETED")
		for _, s := range got {
			var key, name, typ string
			fmt.Sscanf(s, "%s %s %s", &typ, &key, &name)
			if key != "custom:"+name {
				t.Errorf("%s handler: event %q carries key %q, want the key function's %q", handler, s, key, "custom:"+name)
			}
		}
		if len(got) < 3 {
			t.Errorf("%s handler saw %q, want at least the addition of a, its change and its deletion", handler, got)
		}
	}
}

// keyRecorder records "TYPE key name" for every event.
type keyRecorder struct {
	mu  sync.Mutex
	got []string
	ch  chan struct{}
}

func newKeyRecorder() *keyRecorder { return &keyRecorder{ch: make(chan struct{}, 1)} }

func (r *keyRecorder) Handle(_ context.Context, e event.Event[obj]) {
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("%s %s %s", e.Type, e.Key, e.Object.Name))
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// waitFor waits for an event whose "key TYPE" is want and returns every event so far.
func (r *keyRecorder) waitFor(t *testing.T, want string) []string {
	t.Helper()
	for {
		r.mu.Lock()
		got := append([]string(nil), r.got...)
		r.mu.Unlock()
		for _, s := range got {
			var typ, key string
			fmt.Sscanf(s, "%s %s", &typ, &key)
			if key+" "+typ == want {
				return got
			}
		}
		receiveWithin(t, r.ch, fmt.Sprintf("event %s; got %q", want, got))
	}
}

// receiveWithin receives from ch, failing t with what if nothing comes within 30s.
func receiveWithin[V any](t *testing.T, ch <-chan V, what string) V {
	t.Helper()
	return testwait.Receive(t, ch, what, 30*time.Second)
}

// eventually polls cond until it holds, failing t with what if it does not within 30s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, what, cond, 30*time.Second)
}

func TestHandlerFuncsDispatchEachTypeWithWhatItNeeds(t *testing.T) {
	old, cur := cm("ns", "a", nil), cm("ns", "a", map[string]string{"v": "2"})
	tests := []struct {
		name string
		e    event.Event[obj]
		want []string
	}{
		{"an addition calls AddFunc", event.Event[obj]{Type: event.Added, Object: cur}, []string{"add v=2"}},
		{"a modification calls UpdateFunc with the prior state", event.Event[obj]{Type: event.Modified, Object: cur, Prior: old},
			[]string{"update v= -> v=2"}},
		{"a watched deletion has a known final state", event.Event[obj]{Type: event.Deleted, Object: cur, Prior: cur},
			[]string{"delete v=2 finalStateUnknown=false"}},
		{"a deletion inferred from a relist says its final state is unknown",
			event.Event[obj]{Type: event.Deleted, Object: cur, Prior: cur, Sync: true, FinalStateUnknown: true},
			[]string{"delete v=2 finalStateUnknown=true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			v := func(o obj) string { return "v=" + o.Labels["v"] }
			controller.HandlerFuncs[obj]{
				AddFunc:    func(_ context.Context, o obj) { got = append(got, "add "+v(o)) },
				UpdateFunc: func(_ context.Context, o, n obj) { got = append(got, "update "+v(o)+" -> "+v(n)) },
				DeleteFunc: func(_ context.Context, o obj, unknown bool) {
					got = append(got, fmt.Sprintf("delete %s finalStateUnknown=%v", v(o), unknown))
				},
			}.Handle(context.Background(), tt.e)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			// With no functions set, every event is ignored.
			controller.HandlerFuncs[obj]{}.Handle(context.Background(), tt.e)
		})
	}
}

func TestRemoveDiscardsTheBacklog(t *testing.T) {
	src := fake.New[obj, list]()
	c := testctl.New(t, src, controller.Options[obj]{})
	release := make(chan struct{})
	blocked := newRecorder()
	blocked.hook = func(event.Event[obj]) { <-release }
	reg := mustAdd(t, c, "blocked", blocked)
	run(t, c)
	defer close(release)
	_ = src.WaitForWatchers(context.Background(), 1)
	const keys = 50
	for i := range keys {
		if _, err := src.Create(cm("ns", fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "all but the key being handled wait in the backlog", func() bool { return reg.Pending() == keys-1 })
	reg.Remove()
	if got := reg.Pending(); got != 0 {
		t.Errorf("Pending() = %d after Remove, want 0: the backlog must be discarded", got)
	}
}

func TestRegistrationWaitForSyncMeansALaterChangeIsAnUpdate(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil))
	c := testctl.New(t, src, controller.Options[obj]{})
	release := make(chan struct{})
	var mu sync.Mutex
	var got []string
	updated := make(chan struct{})
	reg := mustAdd(t, c, "funcs", controller.HandlerFuncs[obj]{
		AddFunc: func(_ context.Context, o obj) {
			<-release // the initial addition is still being handled when the change is made
			mu.Lock()
			got = append(got, "add "+o.Name)
			mu.Unlock()
		},
		UpdateFunc: func(_ context.Context, o, n obj) {
			mu.Lock()
			got = append(got, fmt.Sprintf("update %s %v -> %v", n.Name, o.Labels, n.Labels))
			mu.Unlock()
			close(updated)
		},
	})
	run(t, c) // Controller.WaitForSync has returned: the initial state is in the backlog
	close(release)
	if err := reg.WaitForSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = src.WaitForWatchers(context.Background(), 1)
	a, _ := src.Get("ns", "a")
	a.Labels = map[string]string{"changed": "yes"}
	if _, err := src.Update(a); err != nil {
		t.Fatal(err)
	}
	receiveWithin(t, updated, "the update")
	mu.Lock()
	defer mu.Unlock()
	want := []string{"add a", "update a map[] -> map[changed:yes]"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestRegistrationWaitForSyncEndsWithItsContext(t *testing.T) {
	c := testctl.New(t, fake.New[obj, list](), controller.Options[obj]{})
	reg := mustAdd(t, c, "never run", newRecorder())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := reg.WaitForSync(ctx); err != context.Canceled {
		t.Errorf("WaitForSync on a cancelled context = %v, want context.Canceled", err)
	}
}

func TestNewRefusesANilListerWatcher(t *testing.T) {
	for name, lw := range map[string]controller.ListerWatcher[obj, list]{
		"nil":       nil,
		"typed nil": (*fake.ListerWatcher[obj, list])(nil),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := controller.New(lw, controller.Options[obj]{})
			if !errors.Is(err, controller.ErrNilArgument) || c != nil {
				t.Fatalf("New = %v, %v; want no controller and ErrNilArgument", c, err)
			}
			// A caller that ignored the error gets one from Run, not a panic.
			if err := c.Run(t.Context()); !errors.Is(err, controller.ErrNilArgument) {
				t.Errorf("Run of the nil Controller = %v, want ErrNilArgument", err)
			}
		})
	}
}
