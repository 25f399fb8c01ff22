package reflect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/reflect"
)

// says answers IsWatchListSemanticsUnSupported as told.
type says struct {
	*lw
	unsupported bool
}

func (s says) IsWatchListSemanticsUnSupported() bool { return s.unsupported }

func TestWatchListUnsupportedRecognisesClientGoFakes(t *testing.T) {
	cmGVR := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	var typedNil *lw
	for _, tt := range []struct {
		name string
		lw   any
		want bool
	}{
		{"the fake clientset", kubefake.NewClientset(), true},
		{"a typed client of the fake clientset", kubefake.NewClientset().CoreV1().ConfigMaps("ns"), true},
		{"a typed client of the deprecated simple fake clientset", kubefake.NewSimpleClientset().CoreV1().ConfigMaps(""), true},
		{"the dynamic fake", dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), true},
		{"a resource client of the dynamic fake", dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()).Resource(cmGVR).Namespace("ns"), true},
		{"a resource client of the metadata fake", metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()).Resource(cmGVR), true},
		{"an object tracker", k8stesting.NewObjectTracker(runtime.NewScheme(), nil), true},
		{"a ListerWatcher that says it does not support it", says{fake.New[obj, *corev1.ConfigMapList](), true}, true},
		{"a ListerWatcher that says it supports it", says{fake.New[obj, *corev1.ConfigMapList](), false}, false},
		{"controller/fake, which serves watch-list", fake.New[obj, *corev1.ConfigMapList](), false},
		{"nil", nil, false},
		{"a typed nil", typedNil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := reflect.WatchListUnsupported(tt.lw); got != tt.want {
				t.Errorf("WatchListUnsupported(%T) = %v, want %v", tt.lw, got, tt.want)
			}
		})
	}
}

// A reflector with WatchList over a typed client of client-go's fake clientset, whose
// watch would never end its initial events, lists instead, and syncs.
func TestWatchListOverTheFakeClientsetListsAndSyncs(t *testing.T) {
	cs := kubefake.NewClientset(cm("a"))
	cache := start(t, cs.CoreV1().ConfigMaps("ns"), reflect.Options[obj]{WatchList: true})
	cache.waitFor(t, "replace", cache.last(1))
	var watched bool
	for !watched { // the watch that follows the list: an object created after it arrives
		for _, a := range cs.Actions() {
			if w, ok := a.(k8stesting.WatchAction); ok {
				watched = true
				if opts := w.GetWatchRestrictions(); opts.ResourceVersion == "" {
					t.Errorf("the watch after the list watches from %q", opts.ResourceVersion)
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := cs.CoreV1().ConfigMaps("ns").Create(context.Background(), cm("b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cache.waitFor(t, "the addition", cache.last(2))
	calls, errs := cache.snapshot()
	want := []call{{Op: "Replace", Names: []string{"a"}}, {Op: "Add", Type: event.Added, Names: []string{"b"}}}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("cache calls (-want +got):\n%s", diff)
	}
	if len(errs) != 0 {
		t.Errorf("errors reported: %v", errs)
	}
	for _, a := range cs.Actions() {
		if w, ok := a.(k8stesting.WatchActionImpl); ok && w.ListOptions.SendInitialEvents != nil {
			t.Errorf("the fake clientset was asked for a watch-list: %+v", w.ListOptions)
		}
	}
}

// silent is a hand-written ListerWatcher that accepts a watch-list request and sends
// only what the test sends on its watch, never the bookmark that ends the initial
// events; its lists and plain watches are the fake's.
type silent struct {
	*lw
	streams chan *watch.FakeWatcher
}

func (s silent) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents == nil {
		return s.lw.Watch(ctx, opts)
	}
	w := watch.NewFakeWithChanSize(1, false)
	s.streams <- w
	return w, nil
}

// A watch-list whose initial events never end does not hang: once the stream has been
// silent for WatchListStall, the reflector reports ErrWatchListStalled, lists instead,
// and never tries watch-list again. A stream that delivers events is not stalled.
func TestAWatchListThatNeverEndsItsInitialEventsFallsBackToListing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	src := silent{fake.New[obj, *corev1.ConfigMapList](cm("a"), cm("b")), make(chan *watch.FakeWatcher, 1)}
	cache, r := newReflector(src, reflect.Options[obj]{WatchList: true, Clock: clk})
	reflect.SetStallClock(r, clk) // the stall is timed in real time otherwise
	run(t, r)
	stream := <-src.streams
	stream.Add(cm("a")) // one initial event, then silence
	step(t, clk, reflect.WatchListStall)
	if calls, errs := cache.snapshot(); len(calls)+len(errs) != 0 {
		t.Fatalf("a stream that delivered an event within the period is stalled: calls %v, errors %v", calls, errs)
	}
	step(t, clk, reflect.WatchListStall)
	cache.waitFor(t, "the list's replace", cache.last(1))
	calls, errs := cache.snapshot()
	if diff := cmp.Diff([]call{{Op: "Replace", Names: []string{"a", "b"}}}, calls); diff != "" {
		t.Errorf("cache calls (-want +got):\n%s", diff)
	}
	if len(errs) != 1 || !errors.Is(errs[0], reflect.ErrWatchListStalled) || !strings.Contains(errs[0].Error(), "after 1 initial events") {
		t.Fatalf("errors = %v, want one wrapping ErrWatchListStalled after 1 initial event", errs)
	}
	if !stream.IsStopped() {
		t.Error("the stalled watch was not stopped")
	}
	if got := src.ListCalls(); got != 1 {
		t.Errorf("ListCalls() = %d, want 1", got)
	}
	// A relist, after 410 Gone, lists: watch-list is off for good.
	waitForWatchers(t, src.lw, 1)
	src.lw.CloseWatches()
	if _, err := src.lw.Create(cm("c")); err != nil {
		t.Fatal(err)
	}
	src.lw.Compact()
	step(t, clk, time.Minute) // past the backoff after the short watch
	cache.waitFor(t, "the relist", func([]call, []error) bool { return src.ListCalls() == 2 })
	select {
	case <-src.streams:
		t.Error("the reflector tried watch-list again after it stalled")
	default:
	}
}

// panicky is a ListerWatcher whose IsWatchListSemanticsUnSupported panics.
type panicky struct{ *lw }

func (panicky) IsWatchListSemanticsUnSupported() bool { panic("asked") }

// A ListerWatcher that panics when asked whether it serves watch-list is reported, and
// listed: a list works wherever a watch-list would.
func TestAPanicAskingForWatchListSupportIsReportedAndTheReflectorLists(t *testing.T) {
	src := panicky{fake.New[obj, *corev1.ConfigMapList](cm("a"))}
	cache := start(t, src, reflect.Options[obj]{WatchList: true})
	cache.waitFor(t, "replace", cache.last(1))
	calls, errs := cache.snapshot()
	if diff := cmp.Diff([]call{{Op: "Replace", Names: []string{"a"}}}, calls); diff != "" {
		t.Errorf("cache calls (-want +got):\n%s", diff)
	}
	if len(errs) != 1 || !errors.Is(errs[0], reflect.ErrListerWatcherPanicked) {
		t.Errorf("errors = %v, want one wrapping ErrListerWatcherPanicked", errs)
	}
	if got := src.ListCalls(); got != 1 {
		t.Errorf("ListCalls() = %d, want 1", got)
	}
}

// A 410 Gone in the middle of a watch-list's initial events (the server's watch cache
// compacted past the stream) is routine: the objects streamed so far are dropped, and
// the reflector asks at once for a new watch-list with a consistent read
// (resourceVersion "", DESIGN 19), which replaces the cache once, whole. It does not fall
// back to listing: 410 is not a refusal of watch-list.
func TestGoneDuringAWatchListsInitialEventsStreamsAgainConsistently(t *testing.T) {
	src := silent{fake.New[obj, *corev1.ConfigMapList](cm("a"), cm("b"), cm("c")), make(chan *watch.FakeWatcher, 1)}
	goneOnce := &goneFirst{silent: src}
	cache := start(t, goneOnce, reflect.Options[obj]{WatchList: true})
	stream := <-src.streams
	stream.Add(cm("a"))
	stream.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	cache.waitFor(t, "replace", cache.last(1))
	calls, errs := cache.snapshot()
	if diff := cmp.Diff([]call{{Op: "Replace", Names: []string{"a", "b", "c"}}}, calls); diff != "" {
		t.Errorf("cache calls (-want +got):\n%s", diff)
	}
	if len(errs) != 1 || !reflect.IsRoutine(errs[0]) {
		t.Errorf("errors = %v, want the 410, routine", errs)
	}
	if got := src.ListCalls(); got != 0 {
		t.Errorf("ListCalls() = %d: a 410 is not a refusal of watch-list", got)
	}
	var watchLists []metav1.ListOptions
	for _, a := range src.Actions() {
		if a.Verb == fake.VerbWatch && a.Options.SendInitialEvents != nil {
			watchLists = append(watchLists, a.Options)
		}
	}
	if len(watchLists) != 1 || watchLists[0].ResourceVersion != "" || watchLists[0].ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
		t.Errorf("watch-lists after the 410: %+v, want one consistent read (resourceVersion \"\", NotOlderThan)", watchLists)
	}
}

// goneFirst gives its first watch-list request a stream the test drives (silent's), and
// the others the fake's.
type goneFirst struct {
	silent
	asked bool
}

func (g *goneFirst) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && !g.asked {
		g.asked = true
		return g.silent.Watch(ctx, opts)
	}
	return g.lw.Watch(ctx, opts)
}
