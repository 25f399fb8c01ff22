package fake_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/controller/fake"
)

// The fake satisfies the ListerWatcher interface a reflector needs.
var _ interface {
	List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
} = (*fake.ListerWatcher[*corev1.ConfigMap, *corev1.ConfigMapList])(nil)

// Every test must leave no watcher goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type cmFake = fake.ListerWatcher[*corev1.ConfigMap, *corev1.ConfigMapList]

func newFake(objs ...*corev1.ConfigMap) *cmFake {
	return fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](objs...)
}

// cm returns a ConfigMap as a test writes it.
func cm(ns, name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Data:       map[string]string{"name": name},
	}
}

// withData returns a copy of obj with different data, for updates.
func withData(obj *corev1.ConfigMap, v string) *corev1.ConfigMap {
	obj = obj.DeepCopy()
	obj.Data = map[string]string{"v": v}
	return obj
}

// withLabels returns a copy of obj with other labels.
func withLabels(obj *corev1.ConfigMap, labels map[string]string) *corev1.ConfigMap {
	obj = obj.DeepCopy()
	obj.Labels = labels
	return obj
}

// stored returns obj as the fake holds it: stamped with resource version rv and the UID
// the fake derives from the resource version it was created at.
func stored(obj *corev1.ConfigMap, rv, created int) *corev1.ConfigMap {
	obj = obj.DeepCopy()
	obj.ResourceVersion = fmt.Sprint(rv)
	obj.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", created))
	return obj
}

func bookmark(rv int, initialEnd bool) *corev1.ConfigMap {
	bm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: fmt.Sprint(rv)}}
	if initialEnd {
		bm.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return bm
}

func ev(t watch.EventType, obj runtime.Object) watch.Event {
	return watch.Event{Type: t, Object: obj}
}

const patience = 10 * time.Second

// read returns the next n events of w, failing the test if w closes or is too slow.
func read(t *testing.T, w watch.Interface, n int) []watch.Event {
	t.Helper()
	var got []watch.Event
	for range n {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %d events, want %d: %v", len(got), n, got)
			}
			got = append(got, e)
		case <-time.After(patience):
			t.Fatalf("timed out after %d events, want %d: %v", len(got), n, got)
		}
	}
	return got
}

// readUntilClosed returns the events w delivers before closing.
func readUntilClosed(t *testing.T, w watch.Interface) []watch.Event {
	t.Helper()
	var got []watch.Event
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				return got
			}
			got = append(got, e)
		case <-time.After(patience):
			t.Fatalf("watch not closed; events so far: %v", got)
		}
	}
}

func mustWatch(t *testing.T, f *cmFake, opts metav1.ListOptions) watch.Interface {
	t.Helper()
	w, err := f.Watch(context.Background(), opts)
	if err != nil {
		t.Fatalf("Watch(%+v): %v", opts, err)
	}
	t.Cleanup(w.Stop)
	return w
}

func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ptr[T any](v T) *T { return &v }

func TestListReturnsDeepCopiesAndCurrentResourceVersion(t *testing.T) {
	a, b := cm("ns", "a", nil), cm("ns", "b", nil)
	f := newFake(b, a) // seeded out of order: the list is sorted by key
	a.Data["name"] = "changed by the caller after seeding"

	list := must(f.List(context.Background(), metav1.ListOptions{}))(t)
	want := &corev1.ConfigMapList{
		ListMeta: metav1.ListMeta{ResourceVersion: "2"},
		Items:    []corev1.ConfigMap{*stored(cm("ns", "a", nil), 2, 2), *stored(cm("ns", "b", nil), 1, 1)},
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Fatalf("List (-want +got):\n%s", diff)
	}

	list.Items[0].Data["name"] = "changed by the caller after listing"
	got, ok := f.Get("ns", "a")
	if !ok {
		t.Fatal("Get: not found")
	}
	got.Data["name"] = "changed by the caller after getting"
	if diff := cmp.Diff(want, must(f.List(context.Background(), metav1.ListOptions{}))(t)); diff != "" {
		t.Fatalf("List after callers changed returned objects (-want +got):\n%s", diff)
	}
	if rv := f.ResourceVersion(); rv != "2" {
		t.Fatalf("ResourceVersion() = %q, want 2", rv)
	}
}

func TestWritesBumpResourceVersionAndFailLikeTheServer(t *testing.T) {
	tests := []struct {
		name    string
		write   func(f *cmFake) (*corev1.ConfigMap, error)
		want    *corev1.ConfigMap
		wantErr func(error) bool
		wantRV  string
	}{{
		name:   "create stamps the next resource version and a UID",
		write:  func(f *cmFake) (*corev1.ConfigMap, error) { return f.Create(cm("ns", "b", nil)) },
		want:   stored(cm("ns", "b", nil), 2, 2),
		wantRV: "2",
	}, {
		name: "create keeps a UID the caller set and ignores the caller's resource version",
		write: func(f *cmFake) (*corev1.ConfigMap, error) {
			obj := cm("ns", "b", nil)
			obj.UID, obj.ResourceVersion = "mine", "77"
			return f.Create(obj)
		},
		want: func() *corev1.ConfigMap {
			obj := stored(cm("ns", "b", nil), 2, 2)
			obj.UID = "mine"
			return obj
		}(),
		wantRV: "2",
	}, {
		name:    "create of an existing object is AlreadyExists",
		write:   func(f *cmFake) (*corev1.ConfigMap, error) { return f.Create(cm("ns", "a", nil)) },
		wantErr: apierrors.IsAlreadyExists,
		wantRV:  "1",
	}, {
		name:    "create without a name is Invalid",
		write:   func(f *cmFake) (*corev1.ConfigMap, error) { return f.Create(cm("ns", "", nil)) },
		wantErr: apierrors.IsInvalid,
		wantRV:  "1",
	}, {
		name:    "create of nil is BadRequest",
		write:   func(f *cmFake) (*corev1.ConfigMap, error) { return f.Create(nil) },
		wantErr: apierrors.IsBadRequest,
		wantRV:  "1",
	}, {
		name:   "update without a resource version is unconditional and keeps the UID",
		write:  func(f *cmFake) (*corev1.ConfigMap, error) { return f.Update(withData(cm("ns", "a", nil), "x")) },
		want:   stored(withData(cm("ns", "a", nil), "x"), 2, 1),
		wantRV: "2",
	}, {
		name: "update with the current resource version succeeds",
		write: func(f *cmFake) (*corev1.ConfigMap, error) {
			obj, _ := f.Get("ns", "a")
			return f.Update(withData(obj, "x"))
		},
		want:   stored(withData(cm("ns", "a", nil), "x"), 2, 1),
		wantRV: "2",
	}, {
		name: "update with a stale resource version is Conflict",
		write: func(f *cmFake) (*corev1.ConfigMap, error) {
			obj := withData(cm("ns", "a", nil), "x")
			obj.ResourceVersion = "0"
			return f.Update(obj)
		},
		wantErr: apierrors.IsConflict,
		wantRV:  "1",
	}, {
		name:    "update of a missing object is NotFound",
		write:   func(f *cmFake) (*corev1.ConfigMap, error) { return f.Update(cm("ns", "b", nil)) },
		wantErr: apierrors.IsNotFound,
		wantRV:  "1",
	}, {
		name:   "delete returns the last state with the deletion's resource version",
		write:  func(f *cmFake) (*corev1.ConfigMap, error) { return f.Delete("ns", "a") },
		want:   stored(cm("ns", "a", nil), 2, 1),
		wantRV: "2",
	}, {
		name:    "delete of a missing object is NotFound",
		write:   func(f *cmFake) (*corev1.ConfigMap, error) { return f.Delete("other", "a") },
		wantErr: apierrors.IsNotFound,
		wantRV:  "1",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(cm("ns", "a", nil))
			got, err := tt.write(f)
			switch {
			case tt.wantErr != nil && !tt.wantErr(err):
				t.Fatalf("error = %v, not of the expected kind", err)
			case tt.wantErr == nil && err != nil:
				t.Fatalf("error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("written object (-want +got):\n%s", diff)
			}
			if rv := f.ResourceVersion(); rv != tt.wantRV {
				t.Errorf("ResourceVersion() = %q, want %q", rv, tt.wantRV)
			}
		})
	}
}

func TestNotFoundErrorNamesTheResource(t *testing.T) {
	_, err := newFake().Delete("ns", "a")
	if want := `configmaps "a" not found`; err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %s", err, want)
	}
}

// history builds a fake with the changes rv1: create a, rv2: create b, rv3: update a,
// rv4: delete b, and returns the objects as the fake stored them.
func history(t *testing.T) (f *cmFake, a1, b2, a3, b4 *corev1.ConfigMap) {
	t.Helper()
	f = newFake(cm("ns", "a", nil))
	must(f.Create(cm("ns", "b", nil)))(t)
	must(f.Update(withData(cm("ns", "a", nil), "x")))(t)
	must(f.Delete("ns", "b"))(t)
	return f, stored(cm("ns", "a", nil), 1, 1), stored(cm("ns", "b", nil), 2, 2),
		stored(withData(cm("ns", "a", nil), "x"), 3, 1), stored(cm("ns", "b", nil), 4, 2)
}

func TestWatchReplaysEveryChangeAfterTheResourceVersionThenStreams(t *testing.T) {
	_, _, b2, a3, b4 := history(t)
	c5 := stored(cm("ns", "c", nil), 5, 5) // the live change made after the watch opens
	tests := []struct {
		rv   string
		want []watch.Event
	}{
		{rv: "1", want: []watch.Event{ev(watch.Added, b2), ev(watch.Modified, a3), ev(watch.Deleted, b4), ev(watch.Added, c5)}},
		{rv: "3", want: []watch.Event{ev(watch.Deleted, b4), ev(watch.Added, c5)}},
		{rv: "4", want: []watch.Event{ev(watch.Added, c5)}},
		// As on the API server, "0" and "" start with the current state as ADDED events.
		{rv: "0", want: []watch.Event{ev(watch.Added, a3), ev(watch.Added, c5)}},
		{rv: "", want: []watch.Event{ev(watch.Added, a3), ev(watch.Added, c5)}},
	}
	for _, tt := range tests {
		t.Run("from "+tt.rv, func(t *testing.T) {
			f, _, _, _, _ := history(t)
			w := mustWatch(t, f, metav1.ListOptions{ResourceVersion: tt.rv})
			must(f.Create(cm("ns", "c", nil)))(t)
			if diff := cmp.Diff(tt.want, read(t, w, len(tt.want))); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// An empty fake lists at "0", which a watch reads as "from any version": the write
// between the list and the watch must still reach the watch, as the current state.
func TestWatchFromTheVersionOfAnEmptyListMissesNothing(t *testing.T) {
	f := newFake()
	listed := must(f.List(context.Background(), metav1.ListOptions{}))(t)
	must(f.Create(cm("ns", "a", nil)))(t) // before the watch opens
	w := mustWatch(t, f, metav1.ListOptions{ResourceVersion: listed.ResourceVersion})
	must(f.Create(cm("ns", "b", nil)))(t) // after
	want := []watch.Event{ev(watch.Added, stored(cm("ns", "a", nil), 1, 1)), ev(watch.Added, stored(cm("ns", "b", nil), 2, 2))}
	if diff := cmp.Diff(want, read(t, w, len(want))); diff != "" {
		t.Fatalf("listed at %q, events (-want +got):\n%s", listed.ResourceVersion, diff)
	}
}

func TestCompactedResourceVersionIsGone(t *testing.T) {
	expired := func(msg string) []watch.Event {
		return []watch.Event{ev(watch.Error, &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: msg,
		})}
	}
	_, _, _, a3, b4 := history(t)
	tests := []struct {
		name    string
		compact func(f *cmFake)
		rv      string
		want    []watch.Event // what the watch delivers before closing; nil if it stays open
	}{
		{name: "compacted watch gets a 410 ERROR event and closes", compact: (*cmFake).Compact, rv: "3",
			want: expired("too old resource version: 3 (4)")},
		{name: "watch from the compaction point replays nothing", compact: (*cmFake).Compact, rv: "4"},
		{name: "watch older than CompactTo gets a 410 ERROR event", compact: func(f *cmFake) { f.CompactTo("2") }, rv: "1",
			want: expired("too old resource version: 1 (2)")},
		{name: "compaction never moves back", compact: func(f *cmFake) { f.CompactTo("3"); f.CompactTo("1") }, rv: "2",
			want: expired("too old resource version: 2 (3)")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _, _, _, _ := history(t)
			tt.compact(f)
			w := mustWatch(t, f, metav1.ListOptions{ResourceVersion: tt.rv})
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, readUntilClosed(t, w)); diff != "" {
					t.Fatalf("events (-want +got):\n%s", diff)
				}
				if n := f.Watching(); n != 0 {
					t.Fatalf("Watching() = %d, want 0", n)
				}
				return
			}
			if n := f.Watching(); n != 1 {
				t.Fatalf("Watching() = %d, want 1", n)
			}
		})
	}

	t.Run("watch from CompactTo point replays the rest", func(t *testing.T) {
		f, _, _, _, _ := history(t)
		f.CompactTo("2")
		w := mustWatch(t, f, metav1.ListOptions{ResourceVersion: "2"})
		if diff := cmp.Diff([]watch.Event{ev(watch.Modified, a3), ev(watch.Deleted, b4)}, read(t, w, 2)); diff != "" {
			t.Fatalf("events (-want +got):\n%s", diff)
		}
	})

	t.Run("exact list at a compacted resource version is 410", func(t *testing.T) {
		f, _, _, _, _ := history(t)
		f.Compact()
		_, err := f.List(context.Background(), metav1.ListOptions{ResourceVersion: "3", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if !apierrors.IsResourceExpired(err) {
			t.Fatalf("error = %v, want Expired", err)
		}
	})
}

func TestFutureResourceVersionIsTooLarge(t *testing.T) {
	f, _, _, _, _ := history(t)
	_, err := f.List(context.Background(), metav1.ListOptions{ResourceVersion: "5"})
	if !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		t.Fatalf("List error = %v, want the ResourceVersionTooLarge cause", err)
	}
	w := mustWatch(t, f, metav1.ListOptions{ResourceVersion: "5"})
	got := readUntilClosed(t, w)
	if len(got) != 1 || got[0].Type != watch.Error {
		t.Fatalf("events = %v, want one ERROR", got)
	}
	if err := apierrors.FromObject(got[0].Object); !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		t.Fatalf("ERROR event = %v, want the ResourceVersionTooLarge cause", err)
	}
}

func TestListResourceVersionSemantics(t *testing.T) {
	_, a1, b2, a3, _ := history(t)
	list := func(rv string, items ...*corev1.ConfigMap) *corev1.ConfigMapList {
		l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: []corev1.ConfigMap{}}
		for _, it := range items {
			l.Items = append(l.Items, *it)
		}
		return l
	}
	tests := []struct {
		name    string
		opts    metav1.ListOptions
		want    *corev1.ConfigMapList
		wantErr func(error) bool
	}{
		{name: "unset reads the current state", opts: metav1.ListOptions{}, want: list("4", a3)},
		{name: "0 reads the current state", opts: metav1.ListOptions{ResourceVersion: "0"}, want: list("4", a3)},
		{name: "N reads a state not older than N", opts: metav1.ListOptions{ResourceVersion: "2"}, want: list("4", a3)},
		{name: "NotOlderThan N reads the current state",
			opts: metav1.ListOptions{ResourceVersion: "1", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, want: list("4", a3)},
		{name: "Exact N reads the state at N",
			opts: metav1.ListOptions{ResourceVersion: "2", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, want: list("2", a1, b2)},
		{name: "Exact N before a creation omits the object",
			opts: metav1.ListOptions{ResourceVersion: "1", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, want: list("1", a1)},
		{name: "Exact 0 is invalid",
			opts: metav1.ListOptions{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, wantErr: apierrors.IsInvalid},
		{name: "a match without a resource version is invalid",
			opts: metav1.ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, wantErr: apierrors.IsInvalid},
		{name: "sendInitialEvents is invalid for list", opts: metav1.ListOptions{SendInitialEvents: ptr(true)}, wantErr: apierrors.IsInvalid},
		{name: "a malformed resource version is a bad request", opts: metav1.ListOptions{ResourceVersion: "x"}, wantErr: apierrors.IsBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _, _, _, _ := history(t)
			got, err := f.List(context.Background(), tt.opts)
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("error = %v, not of the expected kind", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("List (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListPagesOverAConsistentSnapshot(t *testing.T) {
	var seeds []*corev1.ConfigMap
	for _, key := range [][2]string{{"b", "x"}, {"a", "y"}, {"a", "x"}, {"c", "x"}, {"b", "y"}} {
		seeds = append(seeds, cm(key[0], key[1], nil))
	}
	f := newFake(seeds...) // keys a/x@3 a/y@2 b/x@1 b/y@5 c/x@4
	ctx := context.Background()

	names := func(l *corev1.ConfigMapList) []string {
		var out []string
		for _, it := range l.Items {
			out = append(out, it.Namespace+"/"+it.Name+"@"+it.ResourceVersion)
		}
		return out
	}
	type page struct {
		Items     []string
		RV        string
		More      bool
		Remaining *int64
	}
	pageOf := func(l *corev1.ConfigMapList) page {
		return page{Items: names(l), RV: l.ResourceVersion, More: l.Continue != "", Remaining: l.RemainingItemCount}
	}

	p1 := must(f.List(ctx, metav1.ListOptions{Limit: 2}))(t)
	// Changes between pages must not show: the pages read the snapshot at RV 5.
	must(f.Delete("b", "y"))(t)
	must(f.Create(cm("b", "z", nil)))(t)
	p2 := must(f.List(ctx, metav1.ListOptions{Limit: 2, Continue: p1.Continue}))(t)
	p3 := must(f.List(ctx, metav1.ListOptions{Limit: 2, Continue: p2.Continue}))(t)

	want := []page{
		{Items: []string{"a/x@3", "a/y@2"}, RV: "5", More: true, Remaining: ptr(int64(3))},
		{Items: []string{"b/x@1", "b/y@5"}, RV: "5", More: true, Remaining: ptr(int64(1))},
		{Items: []string{"c/x@4"}, RV: "5"},
	}
	if diff := cmp.Diff(want, []page{pageOf(p1), pageOf(p2), pageOf(p3)}); diff != "" {
		t.Fatalf("pages (-want +got):\n%s", diff)
	}

	errTests := []struct {
		name    string
		prepare func()
		opts    metav1.ListOptions
		wantErr func(error) bool
	}{
		{name: "continue with a resource version is a bad request",
			opts: metav1.ListOptions{Continue: p1.Continue, ResourceVersion: "5"}, wantErr: apierrors.IsBadRequest},
		{name: "a malformed continue token is a bad request",
			opts: metav1.ListOptions{Continue: "not a token"}, wantErr: apierrors.IsBadRequest},
		{name: "a continue token from a compacted snapshot is 410",
			prepare: f.Compact, opts: metav1.ListOptions{Continue: p1.Continue}, wantErr: apierrors.IsResourceExpired},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.prepare != nil {
				tt.prepare()
			}
			if _, err := f.List(ctx, tt.opts); !tt.wantErr(err) {
				t.Fatalf("error = %v, not of the expected kind", err)
			}
		})
	}
}

func TestListSelectors(t *testing.T) {
	f := newFake(
		cm("ns1", "a", map[string]string{"app": "x"}),
		cm("ns1", "b", map[string]string{"app": "y"}),
		cm("ns2", "a", map[string]string{"app": "x"}),
	)
	tests := []struct {
		name    string
		opts    metav1.ListOptions
		want    []string
		wantErr func(error) bool
	}{
		{name: "label selector", opts: metav1.ListOptions{LabelSelector: "app=x"}, want: []string{"ns1/a", "ns2/a"}},
		{name: "label set selector", opts: metav1.ListOptions{LabelSelector: "app in (y)"}, want: []string{"ns1/b"}},
		{name: "namespace field selector", opts: metav1.ListOptions{FieldSelector: "metadata.namespace=ns1"}, want: []string{"ns1/a", "ns1/b"}},
		{name: "name field selector", opts: metav1.ListOptions{FieldSelector: "metadata.name!=a"}, want: []string{"ns1/b"}},
		{name: "both selectors", opts: metav1.ListOptions{LabelSelector: "app=x", FieldSelector: "metadata.namespace=ns2"}, want: []string{"ns2/a"}},
		{name: "selected nothing", opts: metav1.ListOptions{LabelSelector: "app=z"}},
		{name: "paging counts selected items", opts: metav1.ListOptions{LabelSelector: "app=x", Limit: 1}, want: []string{"ns1/a"}},
		{name: "unsupported field is a bad request", opts: metav1.ListOptions{FieldSelector: "data.name=a"}, wantErr: apierrors.IsBadRequest},
		{name: "malformed label selector is a bad request", opts: metav1.ListOptions{LabelSelector: "app in (x"}, wantErr: apierrors.IsBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := f.List(context.Background(), tt.opts)
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("error = %v, not of the expected kind", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range l.Items {
				got = append(got, it.Namespace+"/"+it.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("items (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWatchSelectorsDeliverMovesAsAddedAndDeleted(t *testing.T) {
	x, y := map[string]string{"app": "x"}, map[string]string{"app": "y"}
	f := newFake(cm("ns1", "a", x), cm("ns1", "b", y), cm("ns2", "c", x)) // RV 3
	w := mustWatch(t, f, metav1.ListOptions{ResourceVersion: "3", LabelSelector: "app=x", FieldSelector: "metadata.namespace=ns1"})

	must(f.Update(withData(cm("ns1", "a", x), "1")))(t) // 4: stays in: MODIFIED
	must(f.Update(withLabels(cm("ns1", "a", x), y)))(t) // 5: moves out: DELETED with its previous state
	must(f.Update(withLabels(cm("ns1", "b", y), x)))(t) // 6: moves in: ADDED
	must(f.Update(withData(cm("ns2", "c", x), "1")))(t) // 7: other namespace: nothing
	must(f.Create(cm("ns1", "d", y)))(t)                // 8: not selected: nothing
	must(f.Delete("ns1", "b"))(t)                       // 9: DELETED

	want := []watch.Event{
		ev(watch.Modified, stored(withData(cm("ns1", "a", x), "1"), 4, 1)),
		ev(watch.Deleted, stored(withData(cm("ns1", "a", x), "1"), 5, 1)),
		ev(watch.Added, stored(withLabels(cm("ns1", "b", y), x), 6, 2)),
		ev(watch.Deleted, stored(withLabels(cm("ns1", "b", y), x), 9, 2)),
	}
	if diff := cmp.Diff(want, read(t, w, len(want))); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}

	// A watch opened now from RV 3 replays the same events from the history.
	replay := mustWatch(t, f, metav1.ListOptions{ResourceVersion: "3", LabelSelector: "app=x", FieldSelector: "metadata.namespace=ns1"})
	if diff := cmp.Diff(want, read(t, replay, len(want))); diff != "" {
		t.Fatalf("replayed events (-want +got):\n%s", diff)
	}
}

func TestWatchListSendsInitialEventsThenEndBookmark(t *testing.T) {
	x, y := map[string]string{"app": "x"}, map[string]string{"app": "y"}
	c3 := stored(cm("ns", "c", x), 3, 3)
	d4 := stored(cm("ns", "d", x), 4, 4) // the live change made after the watch opens
	watchList := func(rv string, bookmarks bool) metav1.ListOptions {
		return metav1.ListOptions{
			ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			SendInitialEvents: ptr(true), AllowWatchBookmarks: bookmarks, LabelSelector: "app=x",
		}
	}
	tests := []struct {
		name    string
		opts    metav1.ListOptions
		compact bool
		want    []watch.Event
	}{{
		name: "from unset resource version",
		opts: watchList("", true),
		want: []watch.Event{
			ev(watch.Added, stored(cm("ns", "a", x), 2, 2)), ev(watch.Added, c3),
			ev(watch.Bookmark, bookmark(3, true)), ev(watch.Added, d4),
		},
	}, {
		name: "from a compacted resource version: not older than it is enough",
		opts: watchList("1", true), compact: true,
		want: []watch.Event{
			ev(watch.Added, stored(cm("ns", "a", x), 2, 2)), ev(watch.Added, c3),
			ev(watch.Bookmark, bookmark(3, true)), ev(watch.Added, d4),
		},
	}, {
		name: "without bookmarks allowed there is no end bookmark",
		opts: watchList("0", false),
		want: []watch.Event{ev(watch.Added, stored(cm("ns", "a", x), 2, 2)), ev(watch.Added, c3), ev(watch.Added, d4)},
	}, {
		name: "sendInitialEvents=false streams from the resource version",
		opts: func() metav1.ListOptions { o := watchList("2", true); o.SendInitialEvents = ptr(false); return o }(),
		want: []watch.Event{ev(watch.Added, c3), ev(watch.Added, d4)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The seeds are created b, a, c: the initial events are sorted by key.
			f := newFake(cm("ns", "b", y), cm("ns", "a", x), cm("ns", "c", x))
			if tt.compact {
				f.Compact()
			}
			w := mustWatch(t, f, tt.opts)
			must(f.Create(cm("ns", "d", x)))(t)
			if diff := cmp.Diff(tt.want, read(t, w, len(tt.want))); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWatchRejectsInvalidOptions(t *testing.T) {
	tests := []struct {
		name      string
		watchList bool
		opts      metav1.ListOptions
		wantErr   func(error) bool
	}{
		{name: "watch-list on a server without the feature", watchList: false,
			opts:    metav1.ListOptions{SendInitialEvents: ptr(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true},
			wantErr: apierrors.IsInvalid},
		{name: "sendInitialEvents without NotOlderThan", watchList: true,
			opts: metav1.ListOptions{SendInitialEvents: ptr(true), AllowWatchBookmarks: true}, wantErr: apierrors.IsInvalid},
		{name: "resourceVersionMatch without sendInitialEvents", watchList: true,
			opts: metav1.ListOptions{ResourceVersion: "1", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, wantErr: apierrors.IsInvalid},
		{name: "a malformed resource version", watchList: true,
			opts: metav1.ListOptions{ResourceVersion: "-1"}, wantErr: apierrors.IsBadRequest},
		{name: "an unsupported field selector", watchList: true,
			opts: metav1.ListOptions{FieldSelector: "spec.x=1"}, wantErr: apierrors.IsBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(cm("ns", "a", nil))
			f.SetWatchListSupported(tt.watchList)
			w, err := f.Watch(context.Background(), tt.opts)
			if !tt.wantErr(err) {
				t.Fatalf("error = %v, not of the expected kind", err)
			}
			if w != nil {
				t.Fatalf("watch = %v, want nil", w)
			}
		})
	}

	t.Run("plain watches still work without the watch-list feature", func(t *testing.T) {
		f := newFake(cm("ns", "a", nil))
		f.SetWatchListSupported(false)
		mustWatch(t, f, metav1.ListOptions{ResourceVersion: "1", AllowWatchBookmarks: true})
	})
}

func TestScriptedFailures(t *testing.T) {
	boom := errors.New("boom")
	ctx := context.Background()
	f := newFake(cm("ns", "a", nil))
	f.FailList(2, boom)
	f.FailWatch(1, boom)

	var listErrs, watchErrs []error
	for range 3 {
		_, err := f.List(ctx, metav1.ListOptions{Limit: 1})
		listErrs = append(listErrs, err)
	}
	for i := range 2 {
		w, err := f.Watch(ctx, metav1.ListOptions{ResourceVersion: fmt.Sprint(i)})
		watchErrs = append(watchErrs, err)
		if w != nil {
			w.Stop()
		}
	}
	f.FailList(5, boom)
	f.FailList(0, nil) // cancels the script
	_, err := f.List(ctx, metav1.ListOptions{})
	listErrs = append(listErrs, err)

	if diff := cmp.Diff([]error{boom, boom, nil, nil}, listErrs, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("List errors (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]error{boom, nil}, watchErrs, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("Watch errors (-want +got):\n%s", diff)
	}
	wantActions := []fake.Action{
		{Verb: fake.VerbList, Options: metav1.ListOptions{Limit: 1}},
		{Verb: fake.VerbList, Options: metav1.ListOptions{Limit: 1}},
		{Verb: fake.VerbList, Options: metav1.ListOptions{Limit: 1}},
		{Verb: fake.VerbWatch, Options: metav1.ListOptions{ResourceVersion: "0"}},
		{Verb: fake.VerbWatch, Options: metav1.ListOptions{ResourceVersion: "1"}},
		{Verb: fake.VerbList, Options: metav1.ListOptions{}},
	}
	if diff := cmp.Diff(wantActions, f.Actions()); diff != "" {
		t.Errorf("Actions (-want +got):\n%s", diff)
	}
	if got, want := [2]int{f.ListCalls(), f.WatchCalls()}, [2]int{4, 2}; got != want {
		t.Errorf("ListCalls, WatchCalls = %v, want %v", got, want)
	}
}

func TestCloseWatchesDeliversQueuedEventsThenCloses(t *testing.T) {
	f := newFake()
	w1 := mustWatch(t, f, metav1.ListOptions{})
	w2 := mustWatch(t, f, metav1.ListOptions{LabelSelector: "app=none"})
	must(f.Create(cm("ns", "a", nil)))(t)
	f.CloseWatches()
	must(f.Create(cm("ns", "b", nil)))(t) // after the close: not delivered

	if n := f.Watching(); n != 0 {
		t.Errorf("Watching() = %d, want 0", n)
	}
	want := []watch.Event{ev(watch.Added, stored(cm("ns", "a", nil), 1, 1))}
	if diff := cmp.Diff(want, readUntilClosed(t, w1)); diff != "" {
		t.Errorf("first watch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]watch.Event(nil), readUntilClosed(t, w2)); diff != "" {
		t.Errorf("second watch (-want +got):\n%s", diff)
	}
}

func TestSendBookmarkOnlyToWatchesThatAllowBookmarks(t *testing.T) {
	f := newFake(cm("ns", "a", nil))
	with := mustWatch(t, f, metav1.ListOptions{ResourceVersion: "1", AllowWatchBookmarks: true})
	without := mustWatch(t, f, metav1.ListOptions{ResourceVersion: "1"})
	f.SendBookmark()
	// The next change shows what each watch received before it, without sleeping.
	must(f.Create(cm("ns", "b", nil)))(t)
	added := ev(watch.Added, stored(cm("ns", "b", nil), 2, 2))

	if diff := cmp.Diff([]watch.Event{ev(watch.Bookmark, bookmark(1, false)), added}, read(t, with, 2)); diff != "" {
		t.Errorf("watch with bookmarks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]watch.Event{added}, read(t, without, 1)); diff != "" {
		t.Errorf("watch without bookmarks (-want +got):\n%s", diff)
	}
}

func TestSendPushesRawEventsToEveryWatch(t *testing.T) {
	f := newFake()
	w := mustWatch(t, f, metav1.ListOptions{LabelSelector: "app=x"})
	status := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Message: "injected"}
	raw := []watch.Event{
		{Type: watch.Error, Object: status},
		{Type: watch.Added, Object: nil},
		{Type: watch.Added, Object: (*corev1.ConfigMap)(nil)},
		{Type: watch.Modified, Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wrong type"}}},
		{Type: "NONSENSE", Object: cm("ns", "a", nil)},
	}
	for _, e := range raw {
		f.Send(e)
	}
	got := read(t, w, len(raw))
	if diff := cmp.Diff(raw, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if got[0].Object == status {
		t.Fatal("Send delivered the caller's object instead of a copy")
	}
}

func TestStopAndCancelCloseTheWatchAndLeaveNoGoroutine(t *testing.T) {
	tests := []struct {
		name string
		end  func(w watch.Interface, cancel context.CancelFunc)
	}{
		{name: "Stop", end: func(w watch.Interface, _ context.CancelFunc) { w.Stop() }},
		{name: "Stop twice", end: func(w watch.Interface, _ context.CancelFunc) { w.Stop(); w.Stop() }},
		{name: "context cancelled", end: func(_ watch.Interface, cancel context.CancelFunc) { cancel() }},
		{name: "Stop after cancel", end: func(w watch.Interface, cancel context.CancelFunc) { cancel(); w.Stop() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(cm("ns", "a", nil))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w, err := f.Watch(ctx, metav1.ListOptions{ResourceVersion: "0", AllowWatchBookmarks: true})
			if err != nil {
				t.Fatal(err)
			}
			// Leave events unread, so the watch's goroutine is blocked sending.
			for i := range 3 {
				must(f.Create(cm("ns", fmt.Sprint("x", i), nil)))(t)
			}
			tt.end(w, cancel)
			for range w.ResultChan() { // drains, and ends once the channel is closed
			}
			if n := f.Watching(); n != 0 {
				t.Errorf("Watching() = %d, want 0", n)
			}
			must(f.Create(cm("ns", "after", nil)))(t) // writing after the end is fine
			goleak.VerifyNone(t)
		})
	}
}

func TestWatchTimeoutEndsTheWatch(t *testing.T) {
	f := newFake()
	w := mustWatch(t, f, metav1.ListOptions{TimeoutSeconds: ptr(int64(1))})
	must(f.Create(cm("ns", "a", nil)))(t)
	want := []watch.Event{ev(watch.Added, stored(cm("ns", "a", nil), 1, 1))}
	if diff := cmp.Diff(want, readUntilClosed(t, w)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if n := f.Watching(); n != 0 {
		t.Fatalf("Watching() = %d, want 0", n)
	}
}

func TestCancelledContextFailsTheCall(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.List(ctx, metav1.ListOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("List error = %v, want context.Canceled", err)
	}
	if _, err := f.Watch(ctx, metav1.ListOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Watch error = %v, want context.Canceled", err)
	}
}

func TestWritersNeverWaitForSlowWatches(t *testing.T) {
	f := newFake()
	w := mustWatch(t, f, metav1.ListOptions{}) // never read until the writes are done
	const n = 2000
	for i := range n {
		must(f.Create(cm("ns", fmt.Sprint(i), nil)))(t)
	}
	got := read(t, w, n)
	if rv := got[n-1].Object.(*corev1.ConfigMap).ResourceVersion; rv != fmt.Sprint(n) {
		t.Fatalf("last event at resource version %s, want %d", rv, n)
	}
}

func TestWaitForWatchers(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	opened := make(chan watch.Interface, 2)
	go func() {
		for range 2 {
			w, err := f.Watch(ctx, metav1.ListOptions{})
			if err != nil {
				panic(err)
			}
			opened <- w
		}
	}()
	if err := f.WaitForWatchers(ctx, 2); err != nil {
		t.Fatalf("WaitForWatchers: %v", err)
	}
	(<-opened).Stop()
	(<-opened).Stop()

	short, cancelShort := context.WithCancel(context.Background())
	cancelShort()
	if err := f.WaitForWatchers(short, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForWatchers with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestConcurrentWritersAndWatchersSeeOneOrder(t *testing.T) {
	f := newFake()
	const writers, perWriter, watchers = 4, 50, 3
	var ws []watch.Interface
	for range watchers {
		ws = append(ws, mustWatch(t, f, metav1.ListOptions{ResourceVersion: "0"}))
	}
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range perWriter {
				name := fmt.Sprintf("w%d-%d", i, j)
				if _, err := f.Create(cm("ns", name, nil)); err != nil {
					t.Error(err)
				}
				if _, err := f.List(context.Background(), metav1.ListOptions{Limit: 3}); err != nil {
					t.Error(err)
				}
				if _, err := f.Delete("ns", name); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for _, w := range ws {
		for i, e := range read(t, w, 2*writers*perWriter) {
			if rv := e.Object.(*corev1.ConfigMap).ResourceVersion; rv != fmt.Sprint(i+1) {
				t.Fatalf("event %d at resource version %s, want %d", i, rv, i+1)
			}
		}
	}
}

func TestUnstructuredObjects(t *testing.T) {
	u := func(name, rv, uid string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"namespace": "ns", "name": name},
		}}
		if rv != "" {
			obj.SetResourceVersion(rv)
			obj.SetUID(types.UID(uid))
		}
		return obj
	}
	f := fake.New[*unstructured.Unstructured, *unstructured.UnstructuredList](u("b", "", ""), u("a", "", ""))
	ctx := context.Background()

	list, err := f.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantList := &unstructured.UnstructuredList{
		Object: map[string]any{"metadata": map[string]any{"resourceVersion": "2"}},
		Items: []unstructured.Unstructured{
			*u("a", "2", "00000000-0000-0000-0000-000000000002"),
			*u("b", "1", "00000000-0000-0000-0000-000000000001"),
		},
	}
	if diff := cmp.Diff(wantList, list); diff != "" {
		t.Fatalf("List (-want +got):\n%s", diff)
	}

	w, err := f.Watch(ctx, metav1.ListOptions{
		SendInitialEvents: ptr(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// A bookmark carries the objects' apiVersion and kind, as one from a server does.
	end := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}}
	end.SetResourceVersion("2")
	end.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	want := []watch.Event{
		ev(watch.Added, u("a", "2", "00000000-0000-0000-0000-000000000002")),
		ev(watch.Added, u("b", "1", "00000000-0000-0000-0000-000000000001")),
		ev(watch.Bookmark, end),
	}
	if diff := cmp.Diff(want, read(t, w, len(want))); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestNewPanicsOnBadSeeds(t *testing.T) {
	tests := []struct {
		name string
		seed []*corev1.ConfigMap
	}{
		{name: "duplicate", seed: []*corev1.ConfigMap{cm("ns", "a", nil), cm("ns", "a", nil)}},
		{name: "nil", seed: []*corev1.ConfigMap{nil}},
		{name: "no name", seed: []*corev1.ConfigMap{cm("ns", "", nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("New did not panic")
				}
			}()
			newFake(tt.seed...)
		})
	}
}

// As kube-apiserver's watch cache does, a watch that allows bookmarks gets one at the
// current resource version 2 s before its timeout, though nothing it selects changed: how
// a client learns that it has seen everything up to a write elsewhere.
func TestAWatchGetsABookmarkTwoSecondsBeforeItsTimeout(t *testing.T) {
	f := newFake(cm("ns", "a", nil))
	w := mustWatch(t, f, metav1.ListOptions{ResourceVersion: "1", AllowWatchBookmarks: true, TimeoutSeconds: ptr(int64(3))})
	defer w.Stop()
	if _, err := f.Create(cm("other", "b", map[string]string{"x": "y"})); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for e := range w.ResultChan() {
		if e.Type != watch.Bookmark {
			continue
		}
		rv := e.Object.(*corev1.ConfigMap).ResourceVersion
		if took := time.Since(start); rv != "2" || took > 2500*time.Millisecond {
			t.Fatalf("bookmark at %s after %v; want 2 about 1 s in", rv, took)
		}
		return
	}
	t.Fatal("the watch ended without a bookmark")
}
