package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

type obj = *corev1.ConfigMap
type list = *corev1.ConfigMapList

// A generated typed client is a ListerWatcher with no adapter.
var _ controller.ListerWatcher[obj, list] = typedcorev1.ConfigMapInterface(nil)
var _ = func(cs kubernetes.Interface) (*controller.Controller[obj, list], error) {
	return controller.New(cs.CoreV1().ConfigMaps("default"), controller.Options[obj]{})
}

func cm(ns, name string, labels map[string]string) obj {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
}

// seen is one event as a handler saw it.
type seen struct {
	Type    event.Type
	Key     string
	RV      string
	PriorRV string
	Sync    bool
	Unknown bool
}

// recorder is a handler that records what it sees, safe for concurrent reading.
type recorder struct {
	mu   sync.Mutex
	got  []seen
	ch   chan struct{}
	hook func(e event.Event[obj])
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1)} }

func (r *recorder) Handle(_ context.Context, e event.Event[obj]) {
	if r.hook != nil {
		r.hook(e)
	}
	s := seen{Type: e.Type, Key: e.Object.Namespace + "/" + e.Object.Name, RV: e.Object.ResourceVersion, Sync: e.Sync, Unknown: e.FinalStateUnknown}
	if e.HasPrior() {
		s.PriorRV = e.Prior.ResourceVersion
	}
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *recorder) events() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.got...)
}

func (r *recorder) waitFor(t *testing.T, n int) []seen {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		if got := r.events(); len(got) >= n {
			return got
		}
		select {
		case <-r.ch:
		case <-timeout:
			t.Fatalf("timed out waiting for %d events; got %+v", n, r.events())
		}
	}
}

// run starts c until the test ends and checks that Run leaves no goroutine behind.
func run(t *testing.T, c *controller.Controller[obj, list]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
		goleak.VerifyNone(t)
	})
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
}

func mustAdd(t *testing.T, c *controller.Controller[obj, list], name string, h controller.Handler[obj]) *controller.Registration {
	t.Helper()
	reg, err := c.AddHandler(name, h)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestHandlersSeeInitialStateThenChangesInOrder(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil))
	c := testctl.New(t, src, controller.Options[obj]{})
	h1, h2 := newRecorder(), newRecorder()
	reg1 := mustAdd(t, c, "one", h1)
	reg2 := mustAdd(t, c, "two", h2)
	run(t, c)
	// Until a handler has handled its initial state, a change merges into the pending
	// addition (and a deletion cancels it): wait for both, or a slow one sees less.
	for _, reg := range []*controller.Registration{reg1, reg2} {
		if err := reg.WaitForSync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	_ = src.WaitForWatchers(context.Background(), 1)
	a, _ := src.Get("ns", "a")
	a.Data = map[string]string{"k": "v"}
	if _, err := src.Update(a); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Delete("ns", "b"); err != nil {
		t.Fatal(err)
	}
	want := []seen{
		{Type: event.Added, Key: "ns/a", RV: "1", Sync: true},
		{Type: event.Added, Key: "ns/b", RV: "2", Sync: true},
		{Type: event.Modified, Key: "ns/a", RV: "3", PriorRV: "1"},
		{Type: event.Deleted, Key: "ns/b", RV: "4", PriorRV: "2"},
	}
	for name, h := range map[string]*recorder{"one": h1, "two": h2} {
		if diff := cmp.Diff(want, h.waitFor(t, 4)); diff != "" {
			t.Errorf("handler %s saw (-want +got):\n%s", name, diff)
		}
	}
}

func TestHasSyncedOnlyAfterInitialListIsDelivered(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil), cm("ns", "c", nil))
	c := testctl.New(t, src, controller.Options[obj]{})
	release := make(chan struct{})
	slow := newRecorder()
	slow.hook = func(event.Event[obj]) { <-release }
	reg := mustAdd(t, c, "slow", slow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Store().Len(); got != 3 {
		t.Errorf("controller synced with %d known objects, want 3", got)
	}
	if reg.HasSynced() {
		t.Error("a handler that has not handled the initial list reports synced")
	}
	close(release)
	<-reg.Synced()
	if got := len(slow.events()); got != 3 {
		t.Errorf("handler synced after %d events, want 3", got)
	}
	cancel()
	<-done
	goleak.VerifyNone(t)
}

func TestHandlerAddedWhileRunningGetsCurrentStateFirst(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil))
	c := testctl.New(t, src, controller.Options[obj]{})
	run(t, c)
	_ = src.WaitForWatchers(context.Background(), 1)
	if _, err := src.Create(cm("ns", "b", nil)); err != nil {
		t.Fatal(err)
	}
	first := newRecorder()
	mustAdd(t, c, "first", first)
	first.waitFor(t, 2) // both objects known to the controller

	late := newRecorder()
	reg := mustAdd(t, c, "late", late)
	<-reg.Synced()
	if _, err := src.Create(cm("ns", "c", nil)); err != nil {
		t.Fatal(err)
	}
	got := late.waitFor(t, 3)
	sort.Slice(got[:2], func(i, j int) bool { return got[i].Key < got[j].Key })
	want := []seen{
		{Type: event.Added, Key: "ns/a", RV: "1", Sync: true},
		{Type: event.Added, Key: "ns/b", RV: "2", Sync: true},
		{Type: event.Added, Key: "ns/c", RV: "3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("late handler saw (-want +got):\n%s", diff)
	}
}

// createBeforeWatch is a ListerWatcher that creates an object in the fake just before
// the first watch opens: a write that lands between the reflector's list and its watch.
type createBeforeWatch struct {
	*fake.ListerWatcher[obj, list]
	once sync.Once
	obj  obj
}

func (c *createBeforeWatch) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	var err error
	c.once.Do(func() { _, err = c.ListerWatcher.Create(c.obj) })
	if err != nil {
		return nil, err
	}
	return c.ListerWatcher.Watch(ctx, opts)
}

// The first list of an empty collection has resource version "0" on the fake; the
// object created before the watch opens is delivered all the same. (Lost, it hung
// ExampleRelated of package typed, which creates a Pod as soon as the loop starts.)
func TestWriteBetweenAnEmptyListAndTheWatchIsDelivered(t *testing.T) {
	src := &createBeforeWatch{ListerWatcher: fake.New[obj, list](), obj: cm("ns", "a", nil)}
	c := testctl.New(t, src, controller.Options[obj]{})
	rec := newRecorder()
	mustAdd(t, c, "rec", rec)
	run(t, c)
	want := []seen{{Type: event.Added, Key: "ns/a", RV: "1"}}
	if diff := cmp.Diff(want, rec.waitFor(t, 1)); diff != "" {
		t.Errorf("handler saw (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ns/a"}, c.Store().Keys()); diff != "" {
		t.Errorf("store keys (-want +got):\n%s", diff)
	}
}

func TestRemovedHandlerStopsReceiving(t *testing.T) {
	src := fake.New[obj, list]()
	c := testctl.New(t, src, controller.Options[obj]{})
	kept, removed := newRecorder(), newRecorder()
	mustAdd(t, c, "kept", kept)
	reg := mustAdd(t, c, "removed", removed)
	run(t, c)
	_ = src.WaitForWatchers(context.Background(), 1)
	_, _ = src.Create(cm("ns", "a", nil))
	removed.waitFor(t, 1)
	reg.Remove()
	reg.Remove() // idempotent
	_, _ = src.Create(cm("ns", "b", nil))
	kept.waitFor(t, 2)
	if got := removed.events(); len(got) != 1 {
		t.Errorf("removed handler saw %+v, want only the first event", got)
	}
}

func TestPanickingHandlerIsRecoveredAndReported(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil))
	errs := make(chan error, 10)
	c := testctl.New(t, src, controller.Options[obj]{Options: reflect.Options[obj]{OnError: func(_ context.Context, err error) { errs <- err }}})
	panicky, calm := newRecorder(), newRecorder()
	panicky.hook = func(e event.Event[obj]) {
		if e.Object.Name == "a" {
			panic("boom")
		}
	}
	mustAdd(t, c, "panicky", panicky)
	mustAdd(t, c, "calm", calm)
	run(t, c)
	calm.waitFor(t, 2)
	got := panicky.waitFor(t, 1)
	if len(got) != 1 || got[0].Key != "ns/b" {
		t.Errorf("panicking handler went on with %+v, want ns/b", got)
	}
	var perr *controller.PanicError
	if err := <-errs; !errors.As(err, &perr) || perr.Kind != "handler" || perr.Name != "panicky" || perr.Key != "ns/a" || perr.Value != "boom" {
		t.Errorf("reported %v, want a PanicError of handler panicky on ns/a", err)
	}
}

func TestBlockedHandlerDoesNotStallOthersAndItsBacklogIsBoundedByKeys(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil))
	c := testctl.New(t, src, controller.Options[obj]{})
	release := make(chan struct{})
	blocked, free := newRecorder(), newRecorder()
	blocked.hook = func(event.Event[obj]) { <-release }
	blockedReg := mustAdd(t, c, "blocked", blocked)
	mustAdd(t, c, "free", free)
	run(t, c)
	defer close(release)
	_ = src.WaitForWatchers(context.Background(), 1)
	const updates = 200
	for i := 0; i < updates; i++ {
		name := []string{"a", "b"}[i%2]
		o, _ := src.Get("ns", name)
		o.Data = map[string]string{"i": string(rune('a' + i%26))}
		if _, err := src.Update(o); err != nil {
			t.Fatal(err)
		}
	}
	// The free handler is not held up by the blocked one: it reaches the final state.
	final := map[string]string{}
	for _, name := range []string{"a", "b"} {
		o, _ := src.Get("ns", name)
		final["ns/"+name] = o.ResourceVersion
	}
	for {
		last := map[string]string{}
		got := free.events()
		for _, e := range got {
			last[e.Key] = e.RV
		}
		if cmp.Equal(final, last) {
			if len(got) > 2+updates {
				t.Errorf("free handler saw %d events for %d changes", len(got), updates)
			}
			break
		}
		free.waitFor(t, len(got)+1)
	}
	// One key is being handled; each key waits at most once in the batch the handler took
	// and once in the backlog, with its changes merged into one event.
	if got := blockedReg.Pending(); got > 2*2 {
		t.Errorf("blocked handler backlog holds %d keys after %d changes to 2 keys, more than twice the keys", got, updates)
	}
	if got := blocked.events(); len(got) != 0 {
		t.Errorf("blocked handler finished %d events while blocked", len(got))
	}
}

func TestStoreReadsAndIndexes(t *testing.T) {
	src := fake.New[obj, list](
		cm("ns1", "a", map[string]string{"app": "web"}),
		cm("ns1", "b", map[string]string{"app": "db"}),
		cm("ns2", "c", map[string]string{"app": "web"}),
	)
	c := testctl.New(t, src, controller.Options[obj]{Indexers: eventcache.Indexers[obj]{
		"app": func(o obj) ([]string, error) { return []string{o.Labels["app"]}, nil },
	}})
	run(t, c)
	names := func(objs []obj) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.Namespace+"/"+o.Name)
		}
		sort.Strings(out)
		return out
	}
	store := c.Store()
	web, err := store.ByIndex("app", "web")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{
		"list":      names(store.List()),
		"namespace": names(store.InNamespace("ns1")),
		"app=web":   names(web),
		"keys":      store.Keys(),
	}
	want := map[string][]string{
		"list":      {"ns1/a", "ns1/b", "ns2/c"},
		"namespace": {"ns1/a", "ns1/b"},
		"app=web":   {"ns1/a", "ns2/c"},
		"keys":      {"ns1/a", "ns1/b", "ns2/c"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reads (-want +got):\n%s", diff)
	}
	if o, ok := store.GetByName("ns2", "c"); !ok || o.Name != "c" {
		t.Errorf("GetByName(ns2, c) = %v, %v", o, ok)
	}
	if _, err := store.ByIndex("nope", "x"); !errors.Is(err, eventcache.ErrNoIndex) {
		t.Errorf("ByIndex on an unknown index: %v, want ErrNoIndex", err)
	}
}

func TestRunOnceAndNoHandlersAfterStop(t *testing.T) {
	c := testctl.New(t, fake.New[obj, list](), controller.Options[obj]{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); !errors.Is(err, controller.ErrAlreadyRunning) {
		t.Errorf("second Run = %v, want ErrAlreadyRunning", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if _, err := c.AddHandler("late", newRecorder()); !errors.Is(err, controller.ErrStopped) {
		t.Errorf("AddHandler after Run = %v, want ErrStopped", err)
	}
	goleak.VerifyNone(t)
}

// TestAddIndexersWhileRunningIndexesEveryObjectAndLaterChanges: an index added while
// changes stream in holds, once they stop, exactly the objects it would hold had it been
// there from the start; a second index of the same name is refused.
func TestAddIndexersWhileRunningIndexesEveryObjectAndLaterChanges(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", map[string]string{"team": "red"}), cm("ns", "b", map[string]string{"team": "blue"}))
	c := testctl.New(t, src, controller.Options[obj]{})
	run(t, c)
	if err := c.WaitForSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	byTeam := eventcache.Indexers[obj]{"team": func(o obj) ([]string, error) { return []string{o.Labels["team"]}, nil }}
	done := make(chan error, 1)
	go func() {
		for i := range 50 {
			team := []string{"red", "blue"}[i%2]
			if _, err := src.Create(cm("ns", fmt.Sprint("x", i), map[string]string{"team": team})); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	if err := c.AddIndexers(byTeam); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, "every object cached", func() bool { return c.Store().Len() == 52 })
	for _, team := range []string{"red", "blue"} {
		got, err := c.Store().ByIndex("team", team)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 26 {
			t.Errorf("ByIndex(team, %s) holds %d objects, want 26", team, len(got))
		}
		for _, o := range got {
			if o.Labels["team"] != team {
				t.Errorf("ByIndex(team, %s) holds %s of team %s", team, o.Name, o.Labels["team"])
			}
		}
	}
	if err := c.AddIndexers(byTeam); !errors.Is(err, eventcache.ErrIndexExists) {
		t.Errorf("adding the index again: %v, want ErrIndexExists", err)
	}
}
