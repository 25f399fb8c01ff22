package eventcache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/typedinformer/typedinformer/event"
)

type obj = *corev1.ConfigMap
type ev = event.Event[obj]

var _ EventCache[obj] = (*EventQueueCollection[obj])(nil)

func cm(name, rv string) obj {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

// delivered is one event as a handler sees it, reduced to what the tests compare.
type delivered struct {
	Key               string
	Type              event.Type
	RV                string
	PriorRV           string
	Sync              bool
	FinalStateUnknown bool
}

type recorder struct {
	got []delivered
	// during, when set, runs inside each Deliver, while the event is being delivered.
	during func(delivered)
}

func (r *recorder) Deliver(batch []ev) {
	for _, e := range batch {
		d := delivered{Key: e.Key, Type: e.Type, RV: e.Object.ResourceVersion, Sync: e.Sync, FinalStateUnknown: e.FinalStateUnknown}
		if e.HasPrior() {
			d.PriorRV = e.Prior.ResourceVersion
		}
		r.got = append(r.got, d)
		if r.during != nil {
			r.during(d)
		}
	}
}

// pipeline is a collection and its consumer, drained synchronously by the tests.
type pipeline struct {
	c   *EventQueueCollection[obj]
	rtc *ResourceTrackingConsumer[obj]
	rec *recorder
}

func newPipeline() *pipeline {
	w := NewWriter[obj](nil)
	rec := &recorder{}
	return &pipeline{c: NewEventQueueCollection(w.Store(), Options[obj]{}), rtc: NewResourceTrackingConsumer[obj](w, rec, nil), rec: rec}
}

// drain consumes everything pending, as Drain does, and returns what was delivered.
func (p *pipeline) drain() []delivered {
	for p.c.backlog.Consume(p.c.byEntry(p.rtc), math.MaxInt) > 0 {
	}
	got := p.rec.got
	p.rec.got = nil
	return got
}

func (p *pipeline) add(t *testing.T, typ event.Type, o obj) {
	t.Helper()
	if err := p.c.Add(ev{Type: typ, Object: o}); err != nil {
		t.Fatalf("Add(%v %s): %v", typ, o.Name, err)
	}
}

func (p *pipeline) replace(t *testing.T, objs ...obj) {
	t.Helper()
	if err := p.c.Replace(objs, "", CompleteList); err != nil {
		t.Fatalf("Replace: %v", err)
	}
}

func TestReplaceSynthesisesDeletionsWithNewestKnownState(t *testing.T) {
	p := newPipeline()
	p.replace(t, cm("kept", "1"), cm("gone", "2"), cm("changed", "3"))
	p.drain()
	p.add(t, event.Modified, cm("changed", "4")) // pending, not yet applied
	p.add(t, event.Added, cm("pending-only", "5"))
	p.replace(t, cm("kept", "6"))
	want := []delivered{
		{Key: "ns/kept", Type: event.Modified, RV: "6", PriorRV: "1", Sync: true},
		{Key: "ns/gone", Type: event.Deleted, RV: "2", PriorRV: "2", Sync: true, FinalStateUnknown: true},
		{Key: "ns/changed", Type: event.Modified, RV: "4", PriorRV: "3"},
		{Key: "ns/changed", Type: event.Deleted, RV: "4", PriorRV: "4", Sync: true, FinalStateUnknown: true},
	}
	got := p.drain()
	// Order across keys follows when each key became pending: "changed" before "kept".
	want = []delivered{want[2], want[3], want[0], want[1]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ns/kept"}, p.c.KnownObjects().Keys()); diff != "" {
		t.Errorf("known keys (-want +got):\n%s", diff)
	}
}

func TestReplaceAfterPendingDeletionYieldsDeletionThenAddition(t *testing.T) {
	p := newPipeline()
	p.replace(t, cm("a", "1"))
	p.drain()
	p.add(t, event.Deleted, cm("a", "2"))
	p.replace(t, cm("a", "3"))
	want := []delivered{
		{Key: "ns/a", Type: event.Deleted, RV: "2", PriorRV: "1"},
		{Key: "ns/a", Type: event.Added, RV: "3", Sync: true},
	}
	if diff := cmp.Diff(want, p.drain()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

func TestSynchronizeNeverResurrects(t *testing.T) {
	tests := []struct {
		name string
		// inFlight resyncs while the deletion of a is being delivered (applied, its
		// handlers being told) rather than while it is pending.
		inFlight bool
	}{
		{name: "deletion pending"},
		{name: "deletion being delivered", inFlight: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline()
			p.replace(t, cm("a", "1"), cm("b", "2"))
			p.drain()
			p.add(t, event.Deleted, cm("a", "3"))
			resync := func() {
				if err := p.c.Synchronize(); err != nil {
					t.Error(err)
				}
			}
			if tt.inFlight {
				p.rec.during = func(d delivered) {
					if d.Type == event.Deleted {
						resync()
					}
				}
			} else {
				resync()
			}
			want := []delivered{
				{Key: "ns/a", Type: event.Deleted, RV: "3", PriorRV: "1"},
				{Key: "ns/b", Type: event.Modified, RV: "2", PriorRV: "2", Sync: true},
			}
			if diff := cmp.Diff(want, p.drain()); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"ns/b"}, p.c.KnownObjects().Keys()); diff != "" {
				t.Errorf("known keys (-want +got):\n%s", diff)
			}
			p.rec.during = nil
			resync()
			want = []delivered{{Key: "ns/b", Type: event.Modified, RV: "2", PriorRV: "2", Sync: true}}
			if diff := cmp.Diff(want, p.drain()); diff != "" {
				t.Errorf("second resync delivered (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUnreadableListItemNeverBecomesADeletion keeps DESIGN 18: an item Replace cannot key
// (nil, nameless), or a list its caller says is incomplete, makes Replace record the
// readable items only and synthesise no deletion, since the missing key may be alive.
// A complete list still deletes what vanished.
func TestUnreadableListItemNeverBecomesADeletion(t *testing.T) {
	tests := []struct {
		name string
		// known is listed and drained first, so the list under test is a relist.
		known []obj
		// pending is added on the watch and left pending when the list arrives.
		pending      []obj
		list         []obj
		completeness ListCompleteness
		wantErr      []error
		want         []delivered
	}{
		{
			name:    "first list with a nil item and a nameless item",
			list:    []obj{cm("a", "1"), nil, cm("", "2"), cm("b", "3")},
			wantErr: []error{event.ErrNilObject, event.ErrNoName},
			want: []delivered{
				{Key: "ns/a", Type: event.Added, RV: "1", Sync: true},
				{Key: "ns/b", Type: event.Added, RV: "3", Sync: true},
			},
		},
		{
			name:    "relist with a nil item",
			known:   []obj{cm("a", "1"), cm("b", "2")},
			list:    []obj{nil, cm("b", "4")},
			wantErr: []error{event.ErrNilObject},
			want:    []delivered{{Key: "ns/b", Type: event.Modified, RV: "4", PriorRV: "2", Sync: true}},
		},
		{
			name:    "relist with a nameless item",
			known:   []obj{cm("a", "1"), cm("b", "2")},
			list:    []obj{cm("", "3"), cm("b", "4")},
			wantErr: []error{event.ErrNoName},
			want:    []delivered{{Key: "ns/b", Type: event.Modified, RV: "4", PriorRV: "2", Sync: true}},
		},
		{
			name:         "relist its caller says is incomplete",
			known:        []obj{cm("a", "1"), cm("b", "2")},
			list:         []obj{cm("b", "4")},
			completeness: IncompleteList,
			want:         []delivered{{Key: "ns/b", Type: event.Modified, RV: "4", PriorRV: "2", Sync: true}},
		},
		{
			name:         "incomplete relist with a key only pending",
			known:        []obj{cm("a", "1")},
			pending:      []obj{cm("p", "2")},
			list:         []obj{cm("a", "3")},
			completeness: IncompleteList,
			want: []delivered{
				{Key: "ns/p", Type: event.Added, RV: "2"},
				{Key: "ns/a", Type: event.Modified, RV: "3", PriorRV: "1", Sync: true},
			},
		},
		{
			name:    "complete relist deletes what vanished",
			known:   []obj{cm("a", "1"), cm("b", "2")},
			pending: []obj{cm("p", "3")},
			list:    []obj{cm("b", "4")},
			// p's addition and synthesised deletion cancel out (DESIGN 4).
			want: []delivered{
				{Key: "ns/b", Type: event.Modified, RV: "4", PriorRV: "2", Sync: true},
				{Key: "ns/a", Type: event.Deleted, RV: "1", PriorRV: "1", Sync: true, FinalStateUnknown: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline()
			if tt.known != nil {
				p.replace(t, tt.known...)
				p.drain()
			}
			for _, o := range tt.pending {
				p.add(t, event.Added, o)
			}
			err := p.c.Replace(tt.list, "", tt.completeness)
			if len(tt.wantErr) == 0 && err != nil {
				t.Errorf("Replace returned %v, want no error", err)
			}
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("Replace returned %v, want it to wrap %v", err, want)
				}
			}
			if diff := cmp.Diff(tt.want, p.drain()); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
			if !p.c.HasSynced() {
				t.Error("HasSynced is false after the valid items were delivered")
			}
		})
	}
}

// TestCompleteListAfterAnIncompleteOneDeletesWhatVanished checks that the deletion an
// incomplete list held back is not lost: the next complete list synthesises it.
func TestCompleteListAfterAnIncompleteOneDeletesWhatVanished(t *testing.T) {
	p := newPipeline()
	p.replace(t, cm("a", "1"), cm("b", "2"))
	p.drain()
	if err := p.c.Replace([]obj{cm("b", "3")}, "", IncompleteList); err != nil {
		t.Fatal(err)
	}
	p.drain()
	p.replace(t, cm("b", "3"))
	want := []delivered{
		{Key: "ns/b", Type: event.Modified, RV: "3", PriorRV: "3", Sync: true},
		{Key: "ns/a", Type: event.Deleted, RV: "1", PriorRV: "1", Sync: true, FinalStateUnknown: true},
	}
	if diff := cmp.Diff(want, p.drain()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

func TestConsumerReportsErrorsWithNothingLocked(t *testing.T) {
	w := NewWriter[obj](Indexers[obj]{"broken": func(obj) ([]string, error) { return nil, errors.New("no values") }})
	c := NewEventQueueCollection(w.Store(), Options[obj]{})
	var errs []error
	rtc := NewResourceTrackingConsumer[obj](w, &recorder{}, func(err error) {
		errs = append(errs, err)
		// An error hook may add a handler, which waits for the key to be consumed, and
		// may record events: neither may wait for the hook.
		c.Between(func() {})
		if err := c.Synchronize(); err != nil {
			t.Error(err)
		}
	})
	if err := c.Add(ev{Type: event.Added, Object: cm("a", "1")}); err != nil {
		t.Fatal(err)
	}
	c.backlog.Consume(rtc, 1)
	if len(errs) != 1 {
		t.Fatalf("reported %v, want the index error once", errs)
	}
	if _, ok := w.Store().Get("ns/a"); !ok {
		t.Error("an object whose index function failed was not stored")
	}
}

// TestBetweenRunsBetweenBatchesWithoutBlockingTheReflector: what a function run by
// Between reads of the known objects is exactly what has been delivered, and the
// reflector records events meanwhile. (The backlog's own tests check that Between waits
// for a batch being delivered; see queue.TestBetweenWaitsForTheBatchAndHoldsOffTheNext.)
func TestBetweenRunsBetweenBatchesWithoutBlockingTheReflector(t *testing.T) {
	p := newPipeline()
	p.replace(t, cm("a", "1"))
	delivering, releaseA := make(chan struct{}), make(chan struct{})
	var deliveredA atomic.Bool
	p.rec.during = func(d delivered) {
		if d.Key == "ns/a" {
			close(delivering)
			<-releaseA
			deliveredA.Store(true)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	drained := make(chan error, 1)
	go func() { drained <- p.c.Drain(ctx, p.rtc) }()
	<-delivering

	known, releaseFn, between := make(chan []string, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(between)
		p.c.Between(func() {
			if !deliveredA.Load() {
				t.Error("Between ran while a key was being delivered")
			}
			known <- p.c.KnownObjects().Keys()
			<-releaseFn
		})
	}()
	close(releaseA)
	if diff := cmp.Diff([]string{"ns/a"}, <-known); diff != "" {
		t.Errorf("known objects while Between runs (-want +got):\n%s", diff)
	}
	// The reflector records events while fn runs; they are applied only after it.
	recorded := make(chan error, 1)
	go func() { recorded <- p.c.Add(ev{Type: event.Added, Object: cm("c", "3")}) }()
	select {
	case err := <-recorded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Add waited for the function Between runs")
	}
	if diff := cmp.Diff([]string{"ns/a"}, p.c.KnownObjects().Keys()); diff != "" {
		t.Errorf("known objects after Add, while Between runs (-want +got):\n%s", diff)
	}
	close(releaseFn)
	<-between
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return p.c.KnownObjects().Len() == 2, nil
	}); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-drained
	want := []delivered{
		{Key: "ns/a", Type: event.Added, RV: "1", Sync: true},
		{Key: "ns/c", Type: event.Added, RV: "3"},
	}
	if diff := cmp.Diff(want, p.rec.got); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

func TestConsumerRewritesEventsAgainstKnownObjects(t *testing.T) {
	tests := []struct {
		name  string
		known []obj
		add   ev
		want  []delivered
	}{
		{name: "addition of a known key arrives as a modification with its prior",
			known: []obj{cm("a", "1")}, add: ev{Type: event.Added, Object: cm("a", "2")},
			want: []delivered{{Key: "ns/a", Type: event.Modified, RV: "2", PriorRV: "1"}}},
		{name: "modification of an unknown key arrives as an addition",
			add:  ev{Type: event.Modified, Object: cm("a", "2")},
			want: []delivered{{Key: "ns/a", Type: event.Added, RV: "2"}}},
		{name: "modification of a known key carries its prior",
			known: []obj{cm("a", "1")}, add: ev{Type: event.Modified, Object: cm("a", "2")},
			want: []delivered{{Key: "ns/a", Type: event.Modified, RV: "2", PriorRV: "1"}}},
		{name: "deletion carries the final state and the last known state as prior",
			known: []obj{cm("a", "1")}, add: ev{Type: event.Deleted, Object: cm("a", "3")},
			want: []delivered{{Key: "ns/a", Type: event.Deleted, RV: "3", PriorRV: "1"}}},
		{name: "deletion of an unknown key is not delivered",
			add: ev{Type: event.Deleted, Object: cm("a", "3")}, want: nil},
		{name: "a duplicate of the known state is not delivered again",
			known: []obj{cm("a", "5")}, add: ev{Type: event.Modified, Object: cm("a", "5")}, want: nil},
		{name: "a watch event older than the known state is dropped",
			known: []obj{cm("a", "5")}, add: ev{Type: event.Modified, Object: cm("a", "4")}, want: nil},
		{name: "resource versions that are not integers are not compared",
			known: []obj{cm("a", "b")}, add: ev{Type: event.Modified, Object: cm("a", "a")},
			want: []delivered{{Key: "ns/a", Type: event.Modified, RV: "a", PriorRV: "b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline()
			p.replace(t, tt.known...)
			p.drain()
			if err := p.c.Add(tt.add); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, p.drain()); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHasSyncedOnlyAfterInitialListIsDelivered(t *testing.T) {
	tests := []struct {
		name   string
		before func(p *pipeline)
		list   []obj
	}{
		{name: "empty list syncs at once", list: nil},
		{name: "listed objects", list: []obj{cm("a", "1"), cm("b", "2")}},
		{name: "initial list that synthesises deletions", before: func(p *pipeline) {
			_ = p.c.Add(ev{Type: event.Added, Object: cm("old", "1")})
			p.drain()
		}, list: []obj{cm("a", "2")}},
		{name: "initial list that cancels a pending addition", before: func(p *pipeline) {
			_ = p.c.Add(ev{Type: event.Added, Object: cm("old", "1")})
		}, list: []obj{cm("a", "2")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline()
			if tt.before != nil {
				tt.before(p)
			}
			if p.c.HasSynced() {
				t.Fatal("HasSynced() before the first Replace")
			}
			p.replace(t, tt.list...)
			for p.c.Len() > 0 {
				if p.c.HasSynced() {
					t.Fatalf("HasSynced() with %d keys still pending", p.c.Len())
				}
				p.c.backlog.Consume(p.rtc, 1)
			}
			if !p.c.HasSynced() {
				t.Fatal("HasSynced() is false after everything was delivered")
			}
		})
	}
}

func TestAddRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		e    ev
	}{
		{name: "nil object", e: ev{Type: event.Added}},
		{name: "object with no name", e: ev{Type: event.Added, Object: cm("", "1")}},
		{name: "event with no type", e: ev{Object: cm("a", "1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline()
			if err := p.c.Add(tt.e); err == nil {
				t.Fatal("Add returned no error")
			}
			if p.c.Len() != 0 {
				t.Errorf("Len() = %d after a rejected event, want 0", p.c.Len())
			}
		})
	}
}

func TestStaleWatchEventIsReported(t *testing.T) {
	w := NewWriter[obj](nil)
	var errs []error
	rtc := NewResourceTrackingConsumer[obj](w, &recorder{}, func(err error) { errs = append(errs, err) })
	for _, e := range []ev{
		{Type: event.Added, Object: cm("a", "5")},
		{Type: event.Modified, Object: cm("a", "5")},
		{Type: event.Modified, Object: cm("a", "3")},
	} {
		e.Key = "ns/a"
		out, found := rtc.Apply([]ev{e})
		rtc.Deliver(out)
		rtc.Report(found)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrStaleEvent) {
		t.Errorf("reported %v, want one ErrStaleEvent for the older state and nothing for the duplicate", errs)
	}
	if got, _ := w.Store().Get("ns/a"); got.ResourceVersion != "5" {
		t.Errorf("the cache went back to resource version %s", got.ResourceVersion)
	}
}

// DESIGN 7: a relist that finds another object (another UID) under a known key delivers the old
// one's deletion, then the new one as an addition; the same UID is a modification. The
// cache tells UIDs the server assigns apart by the notes it keeps of them (see
// event.UIDNote), and any others by comparing them as strings, with the same answers.
func TestRelistOfARecreatedObjectDeliversDeletionThenAddition(t *testing.T) {
	const (
		uuid1 = "6f1c9a3e-0a5b-4c1e-9d5e-2b7f4c3a1d00"
		uuid2 = "6f1c9a3e-0a5b-4c1e-9d5e-2b7f4c3a1d01" // differs in the last digit only
	)
	recreatedWant := []delivered{
		{Key: "ns/a", Type: event.Deleted, RV: "1", PriorRV: "1", Sync: true, FinalStateUnknown: true},
		{Key: "ns/a", Type: event.Added, RV: "5", Sync: true},
		{Key: "ns/b", Type: event.Modified, RV: "2", PriorRV: "2", Sync: true},
	}
	sameWant := []delivered{
		{Key: "ns/a", Type: event.Modified, RV: "5", PriorRV: "1", Sync: true},
		{Key: "ns/b", Type: event.Modified, RV: "2", PriorRV: "2", Sync: true},
	}
	for _, tc := range []struct {
		name     string
		old, new types.UID
		want     []delivered
	}{
		{"UUIDs, different", uuid1, uuid2, recreatedWant},
		{"UUIDs, the same", uuid1, uuid1, sameWant},
		{"other UIDs, different", "uid-1", "uid-2", recreatedWant},
		{"other UIDs, the same", "uid-1", "uid-1", sameWant},
		{"a UUID, then another UID", uuid1, "uid-1", recreatedWant},
		{"another UID, then a UUID", "uid-1", uuid1, recreatedWant},
		{"a UUID, then its upper case", uuid1, "6F1C9A3E-0A5B-4C1E-9D5E-2B7F4C3A1D00", recreatedWant},
		{"no UID, then a UUID", "", uuid1, sameWant},
		{"a UUID, then no UID", uuid1, "", sameWant},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeline()
			old := cm("a", "1")
			old.UID = tc.old
			p.replace(t, old, cm("b", "2"))
			p.drain()
			next := cm("a", "5")
			next.UID = tc.new
			p.replace(t, next, cm("b", "2"))
			if diff := cmp.Diff(tc.want, p.drain()); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAddOfAKnownObjectReusesItsKey: with the default key function, Add builds the key of
// a known namespaced object in a buffer and reuses the stored key string, so that a
// change to a known object allocates nothing (its pending entry is merged into).
func TestAddOfAKnownObjectReusesItsKey(t *testing.T) {
	p := newPipeline()
	p.replace(t, cm("a", "1"))
	p.drain()
	rv := 1
	objs := make([]obj, 0, 202)
	for range cap(objs) {
		rv++
		objs = append(objs, cm("a", fmt.Sprint(rv)))
	}
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		if err := p.c.Add(ev{Type: event.Modified, Object: objs[i]}); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("Add of a known object allocated %v times per call, want 0", allocs)
	}
	want := []delivered{{Key: "ns/a", Type: event.Modified, RV: objs[i-1].ResourceVersion, PriorRV: "1"}}
	if diff := cmp.Diff(want, p.drain()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}
