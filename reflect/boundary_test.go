package reflect_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/reflect"
)

// fastRetries makes a failed attempt cost a millisecond, so that the tests see the retry.
var fastRetries = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 20}

// faultyLW passes List and Watch on to a fake through list and watch, which may replace
// what the n-th call (counted from 1) returns. Nil functions pass the fake's answer on.
type faultyLW[L reflect.List] struct {
	src   *lw
	list  func(n int, l *corev1.ConfigMapList, err error) (L, error)
	watch func(n int, w watch.Interface, err error) (watch.Interface, error)

	// lists and watches count calls; only the reflector's goroutine calls.
	lists, watches int
}

func (f *faultyLW[L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	f.lists++
	l, err := f.src.List(ctx, opts)
	if f.list != nil {
		return f.list(f.lists, l, err)
	}
	out, _ := any(l).(L)
	return out, err
}

func (f *faultyLW[L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	f.watches++
	w, err := f.src.Watch(ctx, opts)
	if f.watch != nil {
		return f.watch(f.watches, w, err)
	}
	return w, err
}

// stopped stops w, which a fault replaces, so that the fake's watch leaves no goroutine.
func stopped(w watch.Interface) {
	if w != nil {
		w.Stop()
	}
}

// nilChanWatch is a watch whose result channel is nil: reading it would block forever.
type nilChanWatch struct{}

func (nilChanWatch) ResultChan() <-chan watch.Event { return nil }
func (nilChanWatch) Stop()                          {}

// prepended sends events, then what upstream sends, until it is stopped.
type prepended struct {
	upstream watch.Interface
	result   chan watch.Event
	stop     chan struct{}
	once     sync.Once
}

func prepend(upstream watch.Interface, events ...watch.Event) watch.Interface {
	p := &prepended{upstream: upstream, result: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(p.result)
		send := func(e watch.Event) bool {
			select {
			case p.result <- e:
				return true
			case <-p.stop:
				return false
			}
		}
		for _, e := range events {
			if !send(e) {
				return
			}
		}
		for {
			select {
			case e, ok := <-upstream.ResultChan():
				if !ok || !send(e) {
					return
				}
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

func (p *prepended) ResultChan() <-chan watch.Event { return p.result }

func (p *prepended) Stop() {
	p.once.Do(func() {
		close(p.stop)
		p.upstream.Stop()
	})
}

// listAt answers the n-th List with bad, passing the others on.
func listAt[L reflect.List](n int, bad L, badErr error) func(int, *corev1.ConfigMapList, error) (L, error) {
	return func(call int, l *corev1.ConfigMapList, err error) (L, error) {
		if call == n {
			return bad, badErr
		}
		out, _ := any(l).(L)
		return out, err
	}
}

// watchAt answers the n-th Watch with fault(the fake's watch), passing the others on.
func watchAt(n int, fault func(watch.Interface) watch.Interface) func(int, watch.Interface, error) (watch.Interface, error) {
	return func(call int, w watch.Interface, err error) (watch.Interface, error) {
		if call == n && err == nil {
			return fault(w), nil
		}
		return w, err
	}
}

// instead returns a fault that replaces the fake's watch with bad.
func instead(bad watch.Interface) func(watch.Interface) watch.Interface {
	return func(w watch.Interface) watch.Interface {
		stopped(w)
		return bad
	}
}

// with returns a fault that sends events before the fake's watch.
func with(events ...watch.Event) func(watch.Interface) watch.Interface {
	return func(w watch.Interface) watch.Interface { return prepend(w, events...) }
}

func status410() *metav1.Status {
	return &apierrors.NewResourceExpired("too old resource version").ErrStatus
}

// TestBadInputAtTheBoundaryIsAReportedErrorNeverAPanic keeps DESIGN 18: whatever a
// ListerWatcher returns (nil lists, typed-nil lists, nil and typed-nil watches, a watch
// with no channel, typed-nil ERROR statuses and bookmarks, on the watch and the watch-list
// path) is an error reported through OnError, after which the reflector backs off, retries
// and goes on: the object created afterwards still arrives.
func TestBadInputAtTheBoundaryIsAReportedErrorNeverAPanic(t *testing.T) {
	typedNilBookmark := watch.Event{Type: watch.Bookmark, Object: (*corev1.ConfigMap)(nil)}
	tests := []struct {
		name      string
		watchList bool
		newLW     func(src *lw) any
		wantErr   []error
	}{
		{
			name: "List returns a nil list",
			newLW: func(src *lw) any {
				return &faultyLW[reflect.List]{src: src, list: listAt[reflect.List](1, nil, nil)}
			},
			wantErr: []error{reflect.ErrNilResult},
		},
		{
			name: "List returns a typed-nil list as an interface",
			newLW: func(src *lw) any {
				return &faultyLW[reflect.List]{src: src, list: listAt[reflect.List](1, (*corev1.ConfigMapList)(nil), nil)}
			},
			wantErr: []error{reflect.ErrNilResult},
		},
		{
			name: "List returns a typed-nil list",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, list: listAt[*corev1.ConfigMapList](1, nil, nil)}
			},
			wantErr: []error{reflect.ErrNilResult},
		},
		{
			name: "List returns a typed-nil second page",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, list: listAt[*corev1.ConfigMapList](2, nil, nil)}
			},
			wantErr: []error{reflect.ErrNilResult},
		},
		{
			name: "List returns a nil list that it says is incomplete",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, list: listAt[*corev1.ConfigMapList](1, nil, fmt.Errorf("%w: some", reflect.ErrIncompleteList))}
			},
			wantErr: []error{reflect.ErrIncompleteList},
		},
		{
			name: "List panics",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, list: func(n int, l *corev1.ConfigMapList, err error) (*corev1.ConfigMapList, error) {
					if n == 1 {
						panic("list boom")
					}
					return l, err
				}}
			},
			wantErr: []error{reflect.ErrListerWatcherPanicked},
		},
		{
			name: "Watch panics",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, func(w watch.Interface) watch.Interface {
					stopped(w)
					panic("watch boom")
				})}
			},
			wantErr: []error{reflect.ErrListerWatcherPanicked},
		},
		{
			name:    "Watch returns a nil watch",
			newLW:   func(src *lw) any { return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, instead(nil))} },
			wantErr: []error{reflect.ErrNilResult},
		},
		{
			name: "Watch returns a typed-nil watch",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, instead((*watch.FakeWatcher)(nil)))}
			},
			wantErr: []error{reflect.ErrNilResult},
		},
		{
			name: "Watch returns a watch with a nil channel",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, instead(nilChanWatch{}))}
			},
			wantErr: []error{reflect.ErrNilResult},
		},
		{
			name: "ERROR event with a typed-nil status",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, with(watch.Event{Type: watch.Error, Object: (*metav1.Status)(nil)}))}
			},
			wantErr: []error{reflect.ErrWatchEvent, reflect.ErrUnexpectedObject},
		},
		{
			name: "ERROR event with no object",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, with(watch.Event{Type: watch.Error}))}
			},
			wantErr: []error{reflect.ErrWatchEvent, reflect.ErrUnexpectedObject},
		},
		{
			name: "ERROR event with a typed-nil Unstructured",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, with(watch.Event{Type: watch.Error, Object: (*unstructured.Unstructured)(nil)}))}
			},
			wantErr: []error{reflect.ErrWatchEvent, reflect.ErrUnexpectedObject},
		},
		{
			name: "BOOKMARK with a typed-nil object",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, with(typedNilBookmark))}
			},
			wantErr: []error{reflect.ErrUnexpectedObject},
		},
		{
			name: "BOOKMARK with no object",
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, with(watch.Event{Type: watch.Bookmark}))}
			},
			wantErr: []error{reflect.ErrUnexpectedObject},
		},
		{
			name:      "watch-list: Watch returns a nil watch",
			watchList: true,
			newLW:     func(src *lw) any { return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, instead(nil))} },
			wantErr:   []error{reflect.ErrNilResult},
		},
		{
			name:      "watch-list: BOOKMARK with a typed-nil object among the initial events",
			watchList: true,
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, with(typedNilBookmark))}
			},
			wantErr: []error{reflect.ErrUnexpectedObject},
		},
		{
			name:      "watch-list: ERROR event with a typed-nil status",
			watchList: true,
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, with(watch.Event{Type: watch.Error, Object: (*metav1.Status)(nil)}))}
			},
			wantErr: []error{reflect.ErrWatchEvent, reflect.ErrUnexpectedObject},
		},
		{
			name:      "watch-list: ADDED with a typed-nil object",
			watchList: true,
			newLW: func(src *lw) any {
				return &faultyLW[*corev1.ConfigMapList]{src: src, watch: watchAt(1, with(watch.Event{Type: watch.Added, Object: (*corev1.ConfigMap)(nil)}))}
			},
			wantErr: []error{reflect.ErrUnexpectedObject},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[obj, *corev1.ConfigMapList](cm("a"), cm("b"))
			opts := reflect.Options[obj]{WatchList: tt.watchList, Backoff: fastRetries, PageSize: 1}
			var cache *recordingCache
			switch l := tt.newLW(src).(type) {
			case *faultyLW[reflect.List]:
				cache = start(t, l, opts)
			case *faultyLW[*corev1.ConfigMapList]:
				cache = start(t, l, opts)
			}
			cache.waitFor(t, "a replace with both objects", func(calls []call, _ []error) bool {
				return len(calls) > 0 && cmp.Equal(calls[len(calls)-1], call{Op: "Replace", Names: []string{"a", "b"}})
			})
			waitForWatchers(t, src, 1)
			if _, err := src.Create(cm("c")); err != nil {
				t.Fatal(err)
			}
			cache.waitFor(t, "the object created afterwards", func(calls []call, _ []error) bool {
				return slicesContain(calls, call{Op: "Add", Type: event.Added, Names: []string{"c"}})
			})
			_, errs := cache.snapshot()
			if len(errs) == 0 {
				t.Fatal("no error reported")
			}
			for _, want := range tt.wantErr {
				if !errors.Is(errs[0], want) {
					t.Errorf("first error = %v, want it to wrap %v", errs[0], want)
				}
			}
		})
	}
}

func slicesContain(calls []call, want call) bool {
	for _, c := range calls {
		if cmp.Equal(c, want) {
			return true
		}
	}
	return false
}

// listingsLW serves a sequence of listings, by List or by watch-list, whichever the
// reflector asks for, each once the test lets it through gate. After every listing but
// the last, the watch that follows sends 410 Gone, so that the reflector lists the next.
type listingsLW struct {
	listings [][]runtime.Object
	// errs[i], when set, is returned with listings[i] by List.
	errs []error
	gate chan struct{}
	n    int // listings served; only the reflector's goroutine calls
}

func (l *listingsLW) next(ctx context.Context) ([]runtime.Object, string, error) {
	if l.n > 0 {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
	i := min(l.n, len(l.listings)-1)
	l.n++
	var err error
	if i < len(l.errs) {
		err = l.errs[i]
	}
	return l.listings[i], fmt.Sprint(i + 1), err
}

func (l *listingsLW) List(ctx context.Context, _ metav1.ListOptions) (*metav1.List, error) {
	items, rv, err := l.next(ctx)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	list := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
	for _, o := range items {
		list.Items = append(list.Items, runtime.RawExtension{Object: o})
	}
	return list, err
}

func (l *listingsLW) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	var events []watch.Event
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		items, rv, err := l.next(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range items {
			events = append(events, watch.Event{Type: watch.Added, Object: o})
		}
		end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv, Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		events = append(events, watch.Event{Type: watch.Bookmark, Object: end})
	}
	if l.n < len(l.listings) {
		events = append(events, watch.Event{Type: watch.Error, Object: status410()})
	}
	return prepend(watch.NewProxyWatcher(make(chan watch.Event)), events...), nil
}

// deliveries records, per key, what the consumer delivered, as "TYPE rv".
type deliveries struct {
	mu    sync.Mutex
	byKey map[string][]string
}

func (d *deliveries) Deliver(batch []event.Event[obj]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range batch {
		d.byKey[e.Key] = append(d.byKey[e.Key], fmt.Sprintf("%s %s", e.Type, e.Object.ResourceVersion))
	}
}

func (d *deliveries) of(key string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.byKey[key]...)
}

// TestUnreadableListItemNeverBecomesADeletion keeps DESIGN 18: a relist in which a live
// object's item cannot be read (wrong type, nil, typed nil, an Unreadable, a transform
// error or nil result, no name, or a List that says it is incomplete) reports an error
// and synthesises no deletion, on the list and the watch-list path; once the object is
// readable again, it converges. The last case, a complete list without the object, shows
// the deletion the others hold back.
func TestUnreadableListItemNeverBecomesADeletion(t *testing.T) {
	errTransform := errors.New("cannot transform")
	item := func(name, rv string) obj {
		o := cm(name)
		o.ResourceVersion = rv
		return o
	}
	marked := func(mark string) obj {
		o := item("b", "2")
		o.Annotations = map[string]string{"test": mark}
		return o
	}
	transform := func(o obj) (obj, error) {
		switch o.Annotations["test"] {
		case "transform-error":
			return nil, errTransform
		case "transform-nil":
			return nil, nil
		}
		return o, nil
	}
	// Every case lists a and b; then a at 2 and, unless omitted, the unreadable b; then a
	// and b at 3, readable again.
	tests := []struct {
		name       string
		unreadable runtime.Object
		omitted    bool
		listErr    error
		wantErr    error
		// wantB is what the handlers see of b after the second and the third listing.
		wantB [2][]string
	}{
		{name: "item of the wrong type", unreadable: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}, wantErr: reflect.ErrUnexpectedObject},
		{name: "nil item", unreadable: nil, wantErr: reflect.ErrUnexpectedObject},
		{name: "typed-nil item", unreadable: (*corev1.ConfigMap)(nil), wantErr: reflect.ErrUnexpectedObject},
		{name: "unreadable item", unreadable: &reflect.Unreadable{Object: &unstructured.Unstructured{}, Err: errTransform}, wantErr: errTransform},
		{name: "transform error", unreadable: marked("transform-error"), wantErr: errTransform},
		{name: "transform nil", unreadable: marked("transform-nil"), wantErr: reflect.ErrUnexpectedObject},
		{name: "nameless item", unreadable: item("", "2"), wantErr: event.ErrNoName},
		{name: "List says incomplete", omitted: true, listErr: fmt.Errorf("%w: b does not convert", reflect.ErrIncompleteList), wantErr: reflect.ErrIncompleteList},
		{
			name: "complete list without b deletes it", omitted: true,
			wantB: [2][]string{{"ADDED 1", "DELETED 1"}, {"ADDED 1", "DELETED 1", "ADDED 3"}},
		},
	}
	for _, tt := range tests {
		for _, watchList := range []bool{false, true} {
			if watchList && tt.listErr != nil {
				continue // an answer of List only; the watch-list's counterpart is an Unreadable
			}
			t.Run(fmt.Sprintf("%s/watchList=%v", tt.name, watchList), func(t *testing.T) {
				second := []runtime.Object{item("a", "2")}
				if !tt.omitted {
					second = append(second, tt.unreadable)
				}
				src := &listingsLW{
					listings: [][]runtime.Object{{item("a", "1"), item("b", "1")}, second, {item("a", "3"), item("b", "3")}},
					errs:     []error{nil, tt.listErr},
					gate:     make(chan struct{}),
				}
				w := eventcache.NewWriter[obj](nil)
				c := eventcache.NewEventQueueCollection(w.Store(), eventcache.Options[obj]{})
				got := &deliveries{byKey: map[string][]string{}}
				rtc := eventcache.NewResourceTrackingConsumer[obj](w, got, nil)
				var mu sync.Mutex
				var errs []error
				r := reflect.New[obj, *metav1.List](src, c, reflect.Options[obj]{
					WatchList: watchList, Backoff: fastRetries, Transform: transform,
					OnError: func(_ context.Context, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
				})
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); _ = c.Drain(ctx, rtc) }()
				go func() { defer wg.Done(); r.Run(ctx) }()
				defer func() { cancel(); wg.Wait() }()
				// converged waits until a is known at rv and nothing is pending.
				converged := func(listing, rv string) {
					t.Helper()
					if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
						a, ok := w.Store().Get("ns/a")
						return ok && a.ResourceVersion == rv && c.Len() == 0, nil
					}); err != nil {
						t.Fatalf("the %s listing never arrived: a %v, b %v", listing, got.of("ns/a"), got.of("ns/b"))
					}
				}
				// delivered waits until b's deliveries are want: the store has a batch's
				// events before they are handed on, so converged can hold a moment early.
				delivered := func(t *testing.T, after string, want []string) {
					t.Helper()
					_ = wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
						return cmp.Equal(want, got.of("ns/b")), nil
					})
					if diff := cmp.Diff(want, got.of("ns/b")); diff != "" {
						t.Errorf("deliveries of b after %s (-want +got):\n%s", after, diff)
					}
				}
				wantB := tt.wantB
				if wantB[0] == nil {
					// No deletion, and b keeps the state of the first listing.
					wantB = [2][]string{{"ADDED 1"}, {"ADDED 1", "MODIFIED 3"}}
				}
				converged("first", "1")
				src.gate <- struct{}{}
				converged("second", "2")
				delivered(t, "the second listing", wantB[0])
				src.gate <- struct{}{}
				converged("third", "3")
				delivered(t, "the third listing", wantB[1])
				if b, ok := w.Store().Get("ns/b"); !ok || b.ResourceVersion != "3" {
					t.Errorf("cached b = %v, want it at resource version 3", b)
				}
				mu.Lock()
				defer mu.Unlock()
				if tt.wantErr != nil && !slicesContainsErr(errs, tt.wantErr) {
					t.Errorf("errors = %v, want one wrapping %v", errs, tt.wantErr)
				}
				for _, err := range errs {
					if (tt.wantErr == nil || !errors.Is(err, tt.wantErr)) && !apierrors.IsResourceExpired(err) {
						t.Errorf("unexpected error %v", err)
					}
				}
			})
		}
	}
}

func slicesContainsErr(errs []error, want error) bool {
	for _, err := range errs {
		if errors.Is(err, want) {
			return true
		}
	}
	return false
}

// TestUnreadableWatchedObjectKeepsItsStateUnlessDeleted keeps DESIGN 18 and 15 on the
// watch path: an addition or modification whose object cannot be read is reported with
// its cause and skipped, so the cached object is neither updated nor deleted; a deletion
// whose object cannot be read is reported and still recorded, final-state-unknown and
// keyed by the metadata that can be read, so that a deleted object does not stay cached.
func TestUnreadableWatchedObjectKeepsItsStateUnlessDeleted(t *testing.T) {
	errConvert := errors.New("spec.size: not a number")
	unstructuredA := &unstructured.Unstructured{}
	unstructuredA.SetNamespace("ns")
	unstructuredA.SetName("a")
	unstructuredA.SetResourceVersion("7")
	refusedByTransform := cm("a")
	refusedByTransform.Annotations = map[string]string{"transform": "fails"}
	deletionOfA := call{Op: "Add", Type: event.Deleted, Names: []string{"a"}, FinalStateUnknown: true}
	tests := []struct {
		name  string
		event watch.Event
		// want is the cache call the event becomes, if any.
		want    *call
		wantErr error
	}{
		{name: "added", event: watch.Event{Type: watch.Added, Object: &reflect.Unreadable{Object: cm("a"), Err: errConvert}}, wantErr: errConvert},
		{name: "modified", event: watch.Event{Type: watch.Modified, Object: &reflect.Unreadable{Object: unstructuredA, Err: errConvert}}, wantErr: errConvert},
		{name: "deleted, as a T", event: watch.Event{Type: watch.Deleted, Object: &reflect.Unreadable{Object: cm("a"), Err: errConvert}}, want: &deletionOfA, wantErr: errConvert},
		{name: "deleted, as metadata", event: watch.Event{Type: watch.Deleted, Object: &reflect.Unreadable{Object: unstructuredA, Err: errConvert}}, want: &deletionOfA, wantErr: errConvert},
		{name: "deleted, refused by Transform", event: watch.Event{Type: watch.Deleted, Object: refusedByTransform}, want: &deletionOfA, wantErr: errConvert},
		{name: "deleted, with nothing to key by", event: watch.Event{Type: watch.Deleted, Object: &reflect.Unreadable{Err: errConvert}}, wantErr: errConvert},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
			cache := startWatching(t, src, reflect.Options[obj]{Transform: func(o obj) (obj, error) {
				if o.Annotations["transform"] == "fails" {
					return nil, errConvert
				}
				return o, nil
			}})
			src.Send(tt.event)
			if _, err := src.Create(cm("b")); err != nil {
				t.Fatal(err)
			}
			want := []call{{Op: "Replace", Names: []string{"a"}}}
			if tt.want != nil {
				want = append(want, *tt.want)
			}
			want = append(want, call{Op: "Add", Type: event.Added, Names: []string{"b"}})
			cache.waitFor(t, "the next good event", cache.last(len(want)))
			calls, errs := cache.snapshot()
			if diff := cmp.Diff(want, calls); diff != "" {
				t.Errorf("cache calls (-want +got):\n%s", diff)
			}
			if len(errs) != 1 || !errors.Is(errs[0], errConvert) || !strings.Contains(errs[0].Error(), errConvert.Error()) {
				t.Errorf("errors = %v, want one carrying the conversion error", errs)
			}
		})
	}
}

// TestUnreadableDeletionIsDeliveredWithTheLastKnownState: through the real event cache,
// the deletion recorded for an unreadable DELETED event reaches the handlers with the
// last state the cache knew, marked final-state-unknown, and the object leaves the cache.
func TestUnreadableDeletionIsDeliveredWithTheLastKnownState(t *testing.T) {
	known := cm("a")
	known.Data = map[string]string{"last": "known"}
	src := fake.New[obj, *corev1.ConfigMapList](known)
	w := eventcache.NewWriter[obj](nil)
	c := eventcache.NewEventQueueCollection(w.Store(), eventcache.Options[obj]{})
	got := make(chan event.Event[obj], 10)
	rtc := eventcache.NewResourceTrackingConsumer[obj](w, eventcache.SinkFunc[obj](func(batch []event.Event[obj]) {
		for _, e := range batch {
			got <- e
		}
	}), nil)
	r := reflect.New[obj, *corev1.ConfigMapList](src, c, reflect.Options[obj]{OnError: func(context.Context, error) {}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = c.Drain(ctx, rtc) }()
	go func() { defer wg.Done(); r.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	waitForWatchers(t, src, 1)
	if e := <-got; e.Type != event.Added {
		t.Fatalf("first delivery = %s, want the listed addition", e)
	}
	u := &unstructured.Unstructured{}
	u.SetNamespace("ns")
	u.SetName("a")
	src.Send(watch.Event{Type: watch.Deleted, Object: &reflect.Unreadable{Object: u, Err: errors.New("does not convert")}})
	select {
	case e := <-got:
		if e.Type != event.Deleted || !e.FinalStateUnknown || e.Object.Data["last"] != "known" {
			t.Errorf("delivered %s with data %v, want a final-state-unknown deletion with the last known state", e, e.Object.Data)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the deletion was never delivered")
	}
	if _, ok := w.Store().Get("ns/a"); ok {
		t.Error("the deleted object is still cached")
	}
}

// TestWatchErrorEventFromTheDynamicClientIsUnderstood: the dynamic client decodes an ERROR
// event's status as an Unstructured, not a *metav1.Status; its 410 Gone must still make
// the reflector relist (DESIGN 10) rather than re-watch from a compacted version forever.
func TestWatchErrorEventFromTheDynamicClientIsUnderstood(t *testing.T) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status410())
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetAPIVersion("v1")
	u.SetKind("Status")
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
	cache := startWatching(t, src, reflect.Options[obj]{})
	src.Send(watch.Event{Type: watch.Error, Object: u})
	cache.waitFor(t, "the relist", cache.last(2))
	_, errs := cache.snapshot()
	if len(errs) != 1 || !errors.Is(errs[0], reflect.ErrWatchEvent) || !apierrors.IsResourceExpired(errs[0]) {
		t.Errorf("errors = %v, want one ERROR event carrying 410 Expired", errs)
	}
	if got := src.ListCalls(); got != 2 {
		t.Errorf("ListCalls() = %d, want 2: 410 Gone asks for a relist", got)
	}
}
