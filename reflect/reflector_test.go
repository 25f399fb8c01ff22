package reflect_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/reflect"
)

type obj = *corev1.ConfigMap
type lw = fake.ListerWatcher[obj, *corev1.ConfigMapList]

func cm(name string) obj {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

// call is one call of the EventCache, reduced to what the tests compare.
type call struct {
	Op                string
	Type              event.Type
	Names             []string
	FinalStateUnknown bool
}

// recordingCache is an EventCache that records its calls and, like the real one, rejects
// objects that have no key.
type recordingCache struct {
	mu    sync.Mutex
	calls []call
	errs  []error
	ch    chan struct{}
}

func newRecordingCache() *recordingCache { return &recordingCache{ch: make(chan struct{}, 1)} }

func (c *recordingCache) record(cl call) {
	c.mu.Lock()
	c.calls = append(c.calls, cl)
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c *recordingCache) Add(e event.Event[obj]) error {
	if _, err := event.ObjectKey(e.Object); err != nil {
		return err
	}
	c.record(call{Op: "Add", Type: e.Type, Names: []string{e.Object.Name}, FinalStateUnknown: e.FinalStateUnknown})
	return nil
}

func (c *recordingCache) Replace(objs []obj, _ string, _ eventcache.ListCompleteness) error {
	names := []string{}
	for _, o := range objs {
		names = append(names, o.Name)
	}
	sort.Strings(names)
	c.record(call{Op: "Replace", Names: names})
	return nil
}

func (c *recordingCache) Synchronize() error {
	c.record(call{Op: "Synchronize"})
	return nil
}

func (c *recordingCache) onError(_ context.Context, err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

// snapshot returns copies of the recorded calls and errors, taken under the lock, so that
// a test can read them while the reflector runs.
func (c *recordingCache) snapshot() ([]call, []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]call(nil), c.calls...), append([]error(nil), c.errs...)
}

// waitFor blocks until cond holds for the recorded calls and errors.
func (c *recordingCache) waitFor(t *testing.T, what string, cond func(calls []call, errs []error) bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		calls, errs := c.snapshot()
		if cond(calls, errs) {
			return
		}
		select {
		case <-c.ch:
		case <-timeout:
			t.Fatalf("timed out waiting for %s; calls: %+v; errors: %v", what, calls, errs)
		}
	}
}

func (c *recordingCache) last(n int) func([]call, []error) bool {
	return func(calls []call, _ []error) bool { return len(calls) >= n }
}

// start runs a reflector over src, recording into the cache it returns, until the test
// ends, and checks that it leaves no goroutine.
func start[L reflect.List](t *testing.T, src reflect.ListerWatcher[obj, L], opts reflect.Options[obj]) *recordingCache {
	t.Helper()
	cache, r := newReflector(src, opts)
	run(t, r)
	return cache
}

// newReflector returns a reflector over src that records into the returned cache.
func newReflector[L reflect.List](src reflect.ListerWatcher[obj, L], opts reflect.Options[obj]) (*recordingCache, *reflect.Reflector[obj, L]) {
	cache := newRecordingCache()
	opts.OnError = cache.onError
	return cache, reflect.New(src, cache, opts)
}

// run runs r until cancel is called or the test ends, when it checks that r leaves no
// goroutine; done is closed once Run has returned.
func run[L reflect.List](t *testing.T, r *reflect.Reflector[obj, L]) (cancel func(), done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-ran
		goleak.VerifyNone(t)
	})
	return cancel, ran
}

// step advances clk past any backoff once the reflector is waiting on it.
func step(t *testing.T, clk *clocktesting.FakeClock, d time.Duration) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return clk.HasWaiters(), nil }); err != nil {
		t.Fatal("the reflector never waited on the clock")
	}
	clk.Step(d)
}

// startWatching starts a reflector over src, as start does, and waits until it has
// listed once and opened its watch.
func startWatching(t *testing.T, src *lw, opts reflect.Options[obj]) *recordingCache {
	t.Helper()
	cache := start(t, src, opts)
	cache.waitFor(t, "replace", cache.last(1))
	waitForWatchers(t, src, 1)
	return cache
}

// waitForWatchers blocks until src has n open watches.
func waitForWatchers(t *testing.T, src *lw, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := src.WaitForWatchers(ctx, n); err != nil {
		t.Fatalf("waiting for %d open watches: %v; actions: %v", n, err, requests(src))
	}
}

// requests returns src's List and Watch calls as "verb resourceVersion", oldest first.
func requests(src *lw) []string {
	var out []string
	for _, a := range src.Actions() {
		out = append(out, a.Verb+" "+a.Options.ResourceVersion)
	}
	return out
}

func TestListsThenWatchesFromTheListResourceVersion(t *testing.T) {
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"), cm("b"))
	cache := start(t, src, reflect.Options[obj]{})
	cache.waitFor(t, "replace", cache.last(1))
	if err := src.WaitForWatchers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Create(cm("c")); err != nil {
		t.Fatal(err)
	}
	cache.waitFor(t, "add", cache.last(2))
	calls, _ := cache.snapshot()
	want := []call{{Op: "Replace", Names: []string{"a", "b"}}, {Op: "Add", Type: event.Added, Names: []string{"c"}}}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("cache calls (-want +got):\n%s", diff)
	}
	actions := src.Actions()
	if actions[0].Verb != fake.VerbList || actions[0].Options.ResourceVersion != "" {
		t.Errorf("first action = %+v, want a consistent list (resource version \"\")", actions[0])
	}
	if actions[1].Verb != fake.VerbWatch || actions[1].Options.ResourceVersion != "2" || !actions[1].Options.AllowWatchBookmarks {
		t.Errorf("second action = %+v, want a watch from 2 with bookmarks", actions[1])
	}
}

func TestRewatchesFromLastResourceVersionAfterWatchCloses(t *testing.T) {
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
	cache := startWatching(t, src, reflect.Options[obj]{})
	if _, err := src.Create(cm("b")); err != nil {
		t.Fatal(err)
	}
	cache.waitFor(t, "add b", cache.last(2))
	src.CloseWatches()
	if _, err := src.Create(cm("c")); err != nil {
		t.Fatal(err)
	}
	cache.waitFor(t, "add c", cache.last(3))
	if got := src.ListCalls(); got != 1 {
		t.Errorf("ListCalls() = %d, want 1: a closed watch is resumed, not relisted", got)
	}
	actions := src.Actions()
	if last := actions[len(actions)-1]; last.Verb != fake.VerbWatch || last.Options.ResourceVersion != "2" {
		t.Errorf("last action = %+v, want a watch from resource version 2", last)
	}
}

func TestRelistsAfterGoneWithoutLosingAnything(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"), cm("b"))
	cache := startWatching(t, src, reflect.Options[obj]{Clock: clk})

	// Keep the watch down while things change and history is compacted.
	src.FailWatch(1, apierrors.NewServiceUnavailable("restarting"))
	src.CloseWatches()
	step(t, clk, time.Minute) // the closed watch delivered nothing: backoff
	cache.waitFor(t, "the failed watch", func(_ []call, errs []error) bool { return len(errs) >= 2 })
	if _, err := src.Delete("ns", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Create(cm("c")); err != nil {
		t.Fatal(err)
	}
	src.Compact()
	step(t, clk, time.Minute) // re-watch from 2: 410 Gone
	cache.waitFor(t, "410 Gone", func(_ []call, errs []error) bool {
		return len(errs) >= 3 && apierrors.IsResourceExpired(errs[2])
	})
	cache.waitFor(t, "relist, at once after 410", cache.last(2))
	calls, _ := cache.snapshot()
	want := []call{{Op: "Replace", Names: []string{"a", "b"}}, {Op: "Replace", Names: []string{"b", "c"}}}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("cache calls (-want +got):\n%s", diff)
	}
	var lists []string
	for _, a := range src.Actions() {
		if a.Verb == fake.VerbList {
			lists = append(lists, a.Options.ResourceVersion)
		}
	}
	if diff := cmp.Diff([]string{"", ""}, lists); diff != "" {
		t.Errorf("list resource versions (-want +got): the relist after 410 must be a consistent read\n%s", diff)
	}
}

func TestBacksOffExponentiallyOnListErrors(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
	src.FailList(3, apierrors.NewInternalError(errors.New("etcd is sad")))
	cache := start(t, src, reflect.Options[obj]{Clock: clk, Backoff: wait.Backoff{Duration: time.Second, Factor: 2, Steps: 10, Cap: time.Minute}})
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		cache.waitFor(t, fmt.Sprintf("list error %d", i+1), func(_ []call, errs []error) bool { return len(errs) == i+1 })
		step(t, clk, wait-time.Millisecond)
		if got := src.ListCalls(); got != i+1 {
			t.Fatalf("after %v of backoff %d, ListCalls() = %d, want %d", wait-time.Millisecond, i+1, got, i+1)
		}
		clk.Step(time.Millisecond)
	}
	cache.waitFor(t, "replace", cache.last(1))
	_, errs := cache.snapshot()
	for _, err := range errs {
		if !apierrors.IsInternalError(err) {
			t.Errorf("reported error %v does not carry the server's error", err)
		}
	}
}

func TestWatchErrorEventCarriesServerMessage(t *testing.T) {
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
	cache := startWatching(t, src, reflect.Options[obj]{})
	src.Send(watch.Event{Type: watch.Error, Object: &metav1.Status{
		Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: "etcd is sad",
	}})
	cache.waitFor(t, "error", func(_ []call, errs []error) bool { return len(errs) > 0 })
	_, errs := cache.snapshot()
	err := errs[0]
	var status *apierrors.StatusError
	if !errors.Is(err, reflect.ErrWatchEvent) || !errors.As(err, &status) || status.ErrStatus.Message != "etcd is sad" {
		t.Errorf("error = %v, want ErrWatchEvent wrapping the server's status %q", err, "etcd is sad")
	}
}

func TestBadWatchObjectsAreReportedAndSkipped(t *testing.T) {
	tests := []struct {
		name    string
		event   watch.Event
		wantErr error
	}{
		{name: "object of the wrong type", event: watch.Event{Type: watch.Added, Object: &corev1.Secret{}}, wantErr: reflect.ErrUnexpectedObject},
		{name: "nil object", event: watch.Event{Type: watch.Modified}, wantErr: reflect.ErrUnexpectedObject},
		{name: "typed nil object", event: watch.Event{Type: watch.Modified, Object: (*corev1.ConfigMap)(nil)}, wantErr: reflect.ErrUnexpectedObject},
		{name: "typed nil object in a deletion", event: watch.Event{Type: watch.Deleted, Object: (*corev1.ConfigMap)(nil)}, wantErr: reflect.ErrUnexpectedObject},
		{name: "unreadable with no object", event: watch.Event{Type: watch.Added, Object: &reflect.Unreadable{}}, wantErr: reflect.ErrUnexpectedObject},
		{name: "typed nil unreadable", event: watch.Event{Type: watch.Modified, Object: (*reflect.Unreadable)(nil)}, wantErr: reflect.ErrUnexpectedObject},
		{name: "object with no name", event: watch.Event{Type: watch.Added, Object: cm("")}, wantErr: event.ErrNoName},
		{name: "unknown event type", event: watch.Event{Type: "BOGUS", Object: cm("x")}, wantErr: reflect.ErrUnexpectedObject},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
			cache := startWatching(t, src, reflect.Options[obj]{})
			src.Send(tt.event)
			if _, err := src.Create(cm("b")); err != nil {
				t.Fatal(err)
			}
			cache.waitFor(t, "the next good event", cache.last(2))
			if _, errs := cache.snapshot(); len(errs) != 1 || !errors.Is(errs[0], tt.wantErr) {
				t.Errorf("errors = %v, want one wrapping %v", errs, tt.wantErr)
			}
			if src.ListCalls() != 1 {
				t.Errorf("ListCalls() = %d: a bad object must not cost a relist", src.ListCalls())
			}
		})
	}
}

func TestWatchListStreamsInitialStateAndFallsBackToList(t *testing.T) {
	for _, supported := range []bool{true, false} {
		t.Run(fmt.Sprintf("supported=%v", supported), func(t *testing.T) {
			src := fake.New[obj, *corev1.ConfigMapList](cm("a"), cm("b"))
			src.SetWatchListSupported(supported)
			cache := startWatching(t, src, reflect.Options[obj]{WatchList: true})
			if _, err := src.Create(cm("c")); err != nil {
				t.Fatal(err)
			}
			cache.waitFor(t, "add", cache.last(2))
			calls, _ := cache.snapshot()
			want := []call{{Op: "Replace", Names: []string{"a", "b"}}, {Op: "Add", Type: event.Added, Names: []string{"c"}}}
			if diff := cmp.Diff(want, calls); diff != "" {
				t.Errorf("cache calls (-want +got):\n%s", diff)
			}
			wantLists := 0
			if !supported {
				wantLists = 1
			}
			if got := src.ListCalls(); got != wantLists {
				t.Errorf("ListCalls() = %d, want %d", got, wantLists)
			}
		})
	}
}

func TestPagesLargeLists(t *testing.T) {
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"), cm("b"), cm("c"))
	cache := start(t, src, reflect.Options[obj]{PageSize: 2})
	cache.waitFor(t, "replace", cache.last(1))
	calls, _ := cache.snapshot()
	if diff := cmp.Diff([]call{{Op: "Replace", Names: []string{"a", "b", "c"}}}, calls); diff != "" {
		t.Errorf("cache calls (-want +got):\n%s", diff)
	}
	if got := src.ListCalls(); got != 2 {
		t.Errorf("ListCalls() = %d, want 2 pages", got)
	}
}

func TestResyncsEveryPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
	cache := start(t, src, reflect.Options[obj]{Clock: clk, ResyncPeriod: time.Minute})
	cache.waitFor(t, "replace", cache.last(1))
	step(t, clk, time.Minute)
	cache.waitFor(t, "synchronize", cache.last(2))
	if calls, _ := cache.snapshot(); calls[1].Op != "Synchronize" {
		t.Errorf("second call = %+v, want Synchronize", calls[1])
	}
}

func TestTransformRunsBeforeCaching(t *testing.T) {
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
	cache := startWatching(t, src, reflect.Options[obj]{Transform: func(o obj) (obj, error) {
		o.Name += "-t"
		return o, nil
	}})
	_, _ = src.Create(cm("b"))
	cache.waitFor(t, "add", cache.last(2))
	calls, errs := cache.snapshot()
	want := []call{{Op: "Replace", Names: []string{"a-t"}}, {Op: "Add", Type: event.Added, Names: []string{"b-t"}}}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("cache calls (-want +got):\n%s", diff)
	}
	if len(errs) != 0 {
		t.Errorf("errors = %v, want none", errs)
	}
}

func TestFailedOrNilTransformIsReportedAndSkipped(t *testing.T) {
	errTransform := errors.New("cannot transform")
	tests := []struct {
		name string
		// bad is what Transform returns for the objects named "bad-...".
		bad     func(obj) (obj, error)
		wantErr error
	}{
		{name: "transform error", bad: func(obj) (obj, error) { return nil, errTransform }, wantErr: errTransform},
		{name: "nil result", bad: func(obj) (obj, error) { return nil, nil }, wantErr: reflect.ErrUnexpectedObject},
	}
	for _, tt := range tests {
		for _, watchList := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/watchList=%v", tt.name, watchList), func(t *testing.T) {
				src := fake.New[obj, *corev1.ConfigMapList](cm("a"), cm("bad-listed"))
				cache := startWatching(t, src, reflect.Options[obj]{WatchList: watchList, Transform: func(o obj) (obj, error) {
					if strings.HasPrefix(o.Name, "bad-") {
						return tt.bad(o)
					}
					return o, nil
				}})
				_, _ = src.Create(cm("bad-watched"))
				_, _ = src.Create(cm("b"))
				cache.waitFor(t, "add", cache.last(2))
				calls, errs := cache.snapshot()
				want := []call{{Op: "Replace", Names: []string{"a"}}, {Op: "Add", Type: event.Added, Names: []string{"b"}}}
				if diff := cmp.Diff(want, calls); diff != "" {
					t.Errorf("cache calls (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]error{tt.wantErr, tt.wantErr}, errs, cmpopts.EquateErrors()); diff != "" {
					t.Errorf("errors (-want +got): one per bad object, listed and watched\n%s", diff)
				}
			})
		}
	}
}

// itemsLW lists a *metav1.List, whose items can be anything, and then serves watches that
// stay open and quiet until they are stopped.
type itemsLW struct{ list *metav1.List }

func (l itemsLW) List(context.Context, metav1.ListOptions) (*metav1.List, error) {
	return l.list, nil
}

func (l itemsLW) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return watch.NewProxyWatcher(make(chan watch.Event)), nil
}

func TestBadListItemsAreReportedAndSkipped(t *testing.T) {
	tests := []struct {
		name string
		item runtime.RawExtension
	}{
		{name: "nil item", item: runtime.RawExtension{}},
		{name: "typed nil item", item: runtime.RawExtension{Object: (*corev1.ConfigMap)(nil)}},
		{name: "item of the wrong type", item: runtime.RawExtension{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}}}},
		{name: "undecoded item", item: runtime.RawExtension{Raw: []byte(`{"kind":"ConfigMap"}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := itemsLW{list: &metav1.List{
				ListMeta: metav1.ListMeta{ResourceVersion: "5"},
				Items:    []runtime.RawExtension{{Object: cm("a")}, tt.item, {Object: cm("b")}},
			}}
			cache := start(t, src, reflect.Options[obj]{})
			cache.waitFor(t, "replace", cache.last(1))
			calls, errs := cache.snapshot()
			if diff := cmp.Diff([]call{{Op: "Replace", Names: []string{"a", "b"}}}, calls); diff != "" {
				t.Errorf("cache calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]error{reflect.ErrUnexpectedObject}, errs, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRelistsWithConsistentReadWhenResourceVersionIsTooLarge(t *testing.T) {
	tests := []struct {
		name string
		// bookmarkRV is sent on the first watch, which is then closed, so that the
		// reflector watches again from it.
		bookmarkRV string
		// watchErr, when set, is what that next watch request fails with.
		watchErr     error
		wantRequests []string
	}{
		{
			// The fake answers a watch from a version it has not reached with the
			// server's ERROR event: a Timeout status with the ResourceVersionTooLarge cause.
			name:         "ERROR event from a server behind the last version seen",
			bookmarkRV:   "100",
			wantRequests: []string{"list ", "watch 1", "watch 100", "list ", "watch 1"},
		},
		{
			name:         "older server that says it only in the message",
			bookmarkRV:   "1",
			watchErr:     apierrors.NewTimeoutError("Too large resource version: 1, current: 0", 1),
			wantRequests: []string{"list ", "watch 1", "watch 1", "list ", "watch 1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No backoff can elapse on the fake clock: the relist must come at once, as
			// after 410 Gone.
			clk := clocktesting.NewFakeClock(time.Now())
			src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
			cache := startWatching(t, src, reflect.Options[obj]{Clock: clk})
			if tt.watchErr != nil {
				src.FailWatch(1, tt.watchErr)
			}
			src.Send(watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: tt.bookmarkRV}}})
			src.CloseWatches()
			cache.waitFor(t, "relist", cache.last(2))
			waitForWatchers(t, src, 1)
			if diff := cmp.Diff(tt.wantRequests, requests(src)); diff != "" {
				t.Errorf("requests (-want +got): the relist must be a consistent read\n%s", diff)
			}
			if _, errs := cache.snapshot(); len(errs) != 1 || !apierrors.IsTimeout(errs[0]) {
				t.Errorf("errors = %v, want the server's too large resource version timeout", errs)
			}
		})
	}
}

func TestWatchEndingWithoutEvents(t *testing.T) {
	tests := []struct {
		name string
		// lasted is how long the watch ran, on the reflector's clock, before it closed.
		lasted time.Duration
		// wantErrors is how many errors the closed watch is reported as; a reported one
		// also backs off before the next watch.
		wantErrors int
	}{
		{name: "closed at once is reported and retried after a backoff", lasted: 0, wantErrors: 1},
		{name: "closed just short of a second is still a hot loop", lasted: time.Second - time.Millisecond, wantErrors: 1},
		{name: "quiet until the server's timeout is resumed at once and not reported", lasted: 5 * time.Minute, wantErrors: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
			cache := startWatching(t, src, reflect.Options[obj]{Clock: clk})
			clk.Step(tt.lasted)
			src.CloseWatches()
			if tt.wantErrors > 0 {
				cache.waitFor(t, "the short watch's error", func(_ []call, errs []error) bool { return len(errs) > 0 })
				step(t, clk, time.Minute)
			}
			waitForWatchers(t, src, 1)
			_, errs := cache.snapshot()
			if len(errs) != tt.wantErrors || tt.wantErrors > 0 && !errors.Is(errs[0], reflect.ErrShortWatch) {
				t.Errorf("errors = %v, want %d wrapping ErrShortWatch", errs, tt.wantErrors)
			}
			if diff := cmp.Diff([]string{"list ", "watch 1", "watch 1"}, requests(src)); diff != "" {
				t.Errorf("requests (-want +got): the watch is resumed, not relisted\n%s", diff)
			}
		})
	}
}

func TestBookmarkAdvancesTheResourceVersionOfTheNextWatch(t *testing.T) {
	watched := cm("a")
	watched.Labels = map[string]string{"app": "watched"}
	src := fake.New[obj, *corev1.ConfigMapList](watched)
	startWatching(t, src, reflect.Options[obj]{ListOptions: func(o *metav1.ListOptions) { o.LabelSelector = "app=watched" }})
	// Changes outside the selector advance the resource version to 3 without an event:
	// only the bookmark tells the reflector.
	for _, name := range []string{"b", "c"} {
		if _, err := src.Create(cm(name)); err != nil {
			t.Fatal(err)
		}
	}
	src.SendBookmark()
	src.CloseWatches()
	waitForWatchers(t, src, 1)
	if diff := cmp.Diff([]string{"list ", "watch 1", "watch 3"}, requests(src)); diff != "" {
		t.Errorf("requests (-want +got): the next watch must start from the bookmark's version\n%s", diff)
	}
}

// floodEvents is how many modifications a floodLW watch holds when it opens.
const floodEvents = 20_000

// floodLW lists one ConfigMap and opens watches that hold floodEvents modifications of
// it from the start: the reflector always finds the next event waiting, until it has
// taken them all.
type floodLW struct{}

func (floodLW) List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) {
	return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.ConfigMap{*cm("a")}}, nil
}

func (floodLW) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	ch := make(chan watch.Event, floodEvents)
	for rv := range floodEvents {
		o := cm("a")
		o.ResourceVersion = strconv.Itoa(rv + 2)
		ch <- watch.Event{Type: watch.Modified, Object: o}
	}
	return floodWatch(ch), nil
}

// floodWatch is a watch whose channel stays open after its events: a watch with nothing
// more to say.
type floodWatch chan watch.Event

func (floodWatch) Stop()                            {}
func (w floodWatch) ResultChan() <-chan watch.Event { return w }

// countingCache counts a reflector's calls, for watches too busy to record every event,
// and the additions made before each list and synchronization. Each addition takes a
// while, so that the events of a floodLW watch last.
type countingCache struct {
	adds                   atomic.Int64
	replaced, synchronized chan int64 // the additions made before each
}

func (c *countingCache) Add(event.Event[obj]) error {
	for start := time.Now(); time.Since(start) < 20*time.Microsecond; {
	}
	c.adds.Add(1)
	return nil
}

func (c *countingCache) Replace([]obj, string, eventcache.ListCompleteness) error {
	c.replaced <- c.adds.Load()
	return nil
}

func (c *countingCache) Synchronize() error {
	c.synchronized <- c.adds.Load()
	return nil
}

// TestRequestsAndCancellationAreHeardWhileEventsFloodTheWatch: the reflector takes
// waiting events without looking at its other channels, but only for a few at a time: a
// relist asked for, a resync due and a cancelled context are each heard within a few
// dozen events, never only once the watch has nothing more to deliver.
func TestRequestsAndCancellationAreHeardWhileEventsFloodTheWatch(t *testing.T) {
	cache := &countingCache{replaced: make(chan int64, 2), synchronized: make(chan int64, 1)}
	clk := clocktesting.NewFakeClock(time.Now())
	r := reflect.New(floodLW{}, cache, reflect.Options[obj]{Clock: clk, ResyncPeriod: time.Minute})
	cancel, done := run(t, r)
	// heard fails unless what was asked for, when asked additions had been made, came at
	// most 1,000 additions later (the watch loop looks every 64).
	heard := func(what string, asked int64, at <-chan int64) {
		t.Helper()
		select {
		case got := <-at:
			if got-asked > 1_000 {
				t.Errorf("%s was heard %d events after it was asked for, want at most 1,000 (the watch held %d)", what, got-asked, floodEvents)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s was not heard", what)
		}
	}
	<-cache.replaced
	waitForAdds := func(n int64) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return cache.adds.Load() >= n, nil }); err != nil {
			t.Fatalf("fewer than %d additions: %d", n, cache.adds.Load())
		}
	}
	waitForAdds(100)
	r.RequestRelist()
	heard("the relist", cache.adds.Load(), cache.replaced)

	waitForAdds(cache.adds.Load() + 100)
	if !clk.HasWaiters() {
		t.Fatal("no resync ticker")
	}
	clk.Step(time.Minute)
	heard("the resync", cache.adds.Load(), cache.synchronized)

	waitForAdds(cache.adds.Load() + 100)
	cancelled := cache.adds.Load()
	cancel()
	select {
	case <-done:
		if got := cache.adds.Load() - cancelled; got > 1_000 {
			t.Errorf("Run returned %d events after its context was cancelled, want at most 1,000", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

// Requests from many goroutines at once never block their callers and reach the watch
// loop: relists and progress asked for by 8 goroutines, 1,000 times each, while the watch
// floods, return at once, a relist is heard, and Run still returns once cancelled.
func TestConcurrentRequestsNeverBlockAndAreHeard(t *testing.T) {
	cache := &countingCache{replaced: make(chan int64, 100_000), synchronized: make(chan int64, 1)}
	r := reflect.New(floodLW{}, cache, reflect.Options[obj]{})
	cancel, done := run(t, r)
	<-cache.replaced
	var askers sync.WaitGroup
	for range 8 {
		askers.Go(func() {
			for range 1000 {
				r.RequestRelist()
				r.RequestProgress()
			}
		})
	}
	asked := make(chan struct{})
	go func() { askers.Wait(); close(asked) }()
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the requests blocked their callers")
	}
	select {
	case <-cache.replaced:
	case <-time.After(30 * time.Second):
		t.Fatal("no relist was heard")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}
