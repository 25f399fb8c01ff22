package eventcache

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
)

// checkEntries fails t unless the store holds an entry for its known keys only, as it
// must once nothing is pending: an entry of a key neither known nor pending is memory
// the collection leaked.
func checkEntries(t *testing.T, s *Store[obj]) {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for key, en := range s.items {
		if _, ok := en.Object(); !ok {
			t.Errorf("the store keeps an entry for %s, which is not known (pending: %v)", key, en.Pending())
		}
	}
	if len(s.items) != s.known {
		t.Errorf("the store has %d entries for %d known objects", len(s.items), s.known)
	}
}

// TestEntriesDeleteAndReAddInOneBatch applies a deletion and a re-creation of a known key,
// and an addition and deletion of an unknown one, in one batch: the entry the backlog
// found serves both events of each key, the known key ends up known with its new state
// and one entry, and the unknown key leaves no entry behind.
func TestEntriesDeleteAndReAddInOneBatch(t *testing.T) {
	p := newPipeline()
	p.replace(t, cm("a", "1"))
	p.drain()
	p.add(t, event.Deleted, cm("a", "2"))
	p.add(t, event.Added, cm("a", "3"))
	p.add(t, event.Added, cm("b", "4"))
	p.add(t, event.Modified, cm("b", "5"))
	got := p.drain()
	want := []delivered{
		{Key: "ns/a", Type: event.Deleted, RV: "2", PriorRV: "1"},
		{Key: "ns/a", Type: event.Added, RV: "3"},
		{Key: "ns/b", Type: event.Added, RV: "5"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	if o, ok := p.c.KnownObjects().Get("ns/a"); !ok || o.ResourceVersion != "3" {
		t.Errorf("Get(ns/a) = %v, %v; want the re-created object at 3", o, ok)
	}
	p.add(t, event.Deleted, cm("b", "6"))
	p.add(t, event.Added, cm("c", "7"))
	p.add(t, event.Deleted, cm("c", "8")) // never known: cancels out
	p.drain()
	checkEntries(t, p.c.KnownObjects())
	if keys := p.c.KnownObjects().Keys(); !cmp.Equal(keys, []string{"ns/a"}) {
		t.Errorf("Keys() = %v, want [ns/a]", keys)
	}
}

// TestEntriesRelistWithAKeyGoneWhilePending relists without a key whose modification is
// pending, and without one that is only pending (added, never applied): the first is
// deleted with the pending state as its last, the second is never delivered, and neither
// keeps an entry; readers never see the pending-only key meanwhile.
func TestEntriesRelistWithAKeyGoneWhilePending(t *testing.T) {
	p := newPipeline()
	p.replace(t, cm("kept", "1"), cm("gone", "2"))
	p.drain()
	p.add(t, event.Modified, cm("gone", "3"))
	p.add(t, event.Added, cm("new", "4"))
	s := p.c.KnownObjects()
	if _, ok := s.Get("ns/new"); ok || s.Len() != 2 || len(s.List()) != 2 {
		t.Errorf("before the drain, readers see the pending-only key: Get ok=%v, Len %d, List %d", ok, s.Len(), len(s.List()))
	}
	s.Range(func(key string, o obj) bool {
		if key == "ns/new" || o == nil {
			t.Errorf("Range yields %s, %v before it is applied", key, o)
		}
		return true
	})
	p.replace(t, cm("kept", "5"))
	got := p.drain()
	want := []delivered{
		{Key: "ns/gone", Type: event.Modified, RV: "3", PriorRV: "2"},
		{Key: "ns/gone", Type: event.Deleted, RV: "3", PriorRV: "3", Sync: true, FinalStateUnknown: true},
		{Key: "ns/kept", Type: event.Modified, RV: "5", PriorRV: "1", Sync: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	checkEntries(t, s)
}

// TestEntriesUnderConcurrentAddReplaceSynchronizeAndReads runs the drain loop while
// goroutines add, delete and re-add keys through the watch, relist (dropping a changing
// subset of keys), resync, and read the store, with -race: readers only ever see whole,
// applied objects; the deliveries are consistent (eventcheck); and once a final relist is
// drained the store holds exactly its objects, one entry each.
func TestEntriesUnderConcurrentAddReplaceSynchronizeAndReads(t *testing.T) {
	const keys = 64
	w := NewWriter[obj](nil)
	sink := eventcheck.New[obj]("sink")
	c := NewEventQueueCollection(w.Store(), Options[obj]{})
	rtc := NewResourceTrackingConsumer[obj](w, sink, nil)
	ctx, cancel := context.WithCancel(context.Background())
	drained := make(chan error, 1)
	go func() { drained <- c.Drain(ctx, rtc) }()

	var rv atomic.Int64
	next := func() string { return strconv.FormatInt(rv.Add(1), 10) }
	// One goroutine writes events, as the reflector does: Add, Replace and Synchronize
	// never run at the same time, and resource versions grow along the stream.
	var writer sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	run := func(fn func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				fn(i)
			}
		}()
	}
	run(func(i int) { // the watch: modify, delete, re-add
		writer.Lock()
		defer writer.Unlock()
		typ := []event.Type{event.Added, event.Modified, event.Deleted}[i%3]
		if err := c.Add(ev{Type: typ, Object: cm("k"+strconv.Itoa(i*7%keys), next())}); err != nil {
			t.Error(err)
		}
	})
	run(func(i int) { // relists, each without another tenth of the keys, and resyncs
		writer.Lock()
		var list []obj
		for k := range keys {
			if k%10 != i%10 {
				list = append(list, cm("k"+strconv.Itoa(k), next()))
			}
		}
		err := c.Replace(list, strconv.FormatInt(rv.Load(), 10), CompleteList)
		if err == nil {
			err = c.Synchronize()
		}
		writer.Unlock()
		if err != nil {
			t.Error(err)
		}
		time.Sleep(time.Millisecond) // let the watch write between relists
	})
	s := w.Store()
	run(func(int) { // readers
		for _, o := range s.List() {
			if o == nil || o.Name == "" {
				t.Errorf("List returned %v", o)
			}
		}
		ks := s.Keys()
		if !sort.StringsAreSorted(ks) {
			t.Errorf("Keys() not sorted: %v", ks)
		}
		for _, k := range ks {
			if o, ok := s.Get(k); ok && o == nil {
				t.Errorf("Get(%s) = nil, true", k)
			}
		}
		if n := s.Len(); n < 0 || n > keys {
			t.Errorf("Len() = %d with %d keys", n, keys)
		}
		byNS, err := s.ByIndex(NamespaceIndex, "ns")
		if err != nil {
			t.Error(err)
		}
		for _, o := range byNS {
			if o == nil {
				t.Error("ByIndex returned a nil object")
			}
		}
	})
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	var final []obj
	want := map[string]obj{}
	for k := 0; k < keys; k += 2 {
		o := cm("k"+strconv.Itoa(k), next())
		final, want["ns/"+o.Name] = append(final, o), o
	}
	if err := c.Replace(final, strconv.FormatInt(rv.Load(), 10), CompleteList); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, "the final relist to be drained", func() bool {
		idle := false
		c.Between(func() { idle = c.Len() == 0 })
		return idle
	}, 30*time.Second)
	cancel()
	if err := <-drained; err != context.Canceled {
		t.Errorf("Drain returned %v", err)
	}
	got := map[string]obj{}
	s.Range(func(k string, o obj) bool { got[k] = o; return true })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("known objects after the final relist (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, sink.Known()); diff != "" {
		t.Errorf("what the handlers were told (-want +got):\n%s", diff)
	}
	for _, problem := range sink.Problems() {
		t.Error(problem)
	}
	checkEntries(t, s)
}

// TestEntriesWithABlockedConsumer blocks the consumer's delivery while the watch keeps
// writing: Add never waits for it, the pending keys stay bounded by the keys, and once
// the consumer is released everything is applied, with one entry per known key.
func TestEntriesWithABlockedConsumer(t *testing.T) {
	const keys, events = 100, 100_000
	w := NewWriter[obj](nil)
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	sink := SinkFunc[obj](func([]ev) { once.Do(func() { close(blocked); <-release }) })
	c := NewEventQueueCollection(w.Store(), Options[obj]{})
	ctx, cancel := context.WithCancel(context.Background())
	drained := make(chan error, 1)
	go func() { drained <- c.Drain(ctx, NewResourceTrackingConsumer[obj](w, sink, nil)) }()
	if err := c.Add(ev{Type: event.Added, Object: cm("first", "1")}); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, blocked, "the consumer to block")
	added := make(chan struct{})
	go func() {
		defer close(added)
		for i := range events {
			if err := c.Add(ev{Type: event.Modified, Object: cm(fmt.Sprint("k", i%keys), strconv.Itoa(i+2))}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	testwait.Receive(t, added, fmt.Sprintf("%d Adds while the consumer is blocked", events), 30*time.Second)
	if n := c.Len(); n > keys {
		t.Errorf("%d keys pending after %d events over %d keys", n, events, keys)
	}
	close(release)
	testwait.Eventually(t, "everything to be applied", func() bool { return w.Store().Len() == keys+1 }, 30*time.Second)
	cancel()
	<-drained
	for i := events - keys; i < events; i++ {
		key := fmt.Sprint("ns/k", i%keys)
		if o, ok := w.Store().Get(key); !ok || o.ResourceVersion != strconv.Itoa(i+2) {
			t.Fatalf("Get(%s) = %v, %v; want its last state, %d", key, o, ok, i+2)
		}
	}
	checkEntries(t, w.Store())
}

// TestEntryNotesFollowTheObject checks the notes an entry keeps on its object, which
// spare reading the prior object: an object that moves to another namespace under the
// same key leaves the old namespace's index, the namespaces' spellings go once their last
// object does, and staleness is judged by the noted resource version where both are
// integers and by the objects' own otherwise.
func TestEntryNotesFollowTheObject(t *testing.T) {
	w := NewWriter[obj](nil)
	s := w.Store()
	moved := cm("x", "1")
	w.Set("key", moved)
	other := moved.DeepCopy()
	other.Namespace, other.ResourceVersion = "elsewhere", "2"
	w.Set("key", other)
	if got := s.InNamespace("ns"); len(got) != 0 {
		t.Errorf("InNamespace(ns) = %v after the object moved", got)
	}
	if got := s.InNamespace("elsewhere"); len(got) != 1 || got[0] != other {
		t.Errorf("InNamespace(elsewhere) = %v, want the moved object", got)
	}
	if values, _ := s.IndexValues(NamespaceIndex); !cmp.Equal(values, []string{"elsewhere"}) {
		t.Errorf("namespaces %v, want [elsewhere]", values)
	}
	for _, tc := range []struct {
		held, next string
		stale      bool
	}{
		{"2", "2", true},
		{"2", "1", true},
		{"2", "10", false},
		{"2", "opaque", false}, // not comparable: newer
		{"opaque", "3", false},
		{"3", "4", false},
	} {
		held := cm("y", tc.held)
		w.Set("y", held)
		_, _, _, stale, _ := w.set(nil, "y", cm("y", tc.next), true)
		if stale != tc.stale {
			t.Errorf("holding %s, %s: stale = %v, want %v", tc.held, tc.next, stale, tc.stale)
		}
	}
	w.Delete("key")
	w.Delete("y")
	if len(s.nsNames) != 0 || s.Len() != 0 {
		t.Errorf("after every object is deleted the store spells namespaces %v and holds %d", s.nsNames, s.Len())
	}
	checkEntries(t, s)
}
