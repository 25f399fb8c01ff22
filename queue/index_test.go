package queue_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/fuzzseed"
	"github.com/typedinformer/typedinformer/queue"
)

// mapIndex is a queue.Index over a map, as the event cache keeps one: an entry holds the
// consumer's object for its key.
type mapIndex struct {
	m map[string]*queue.Entry[*corev1.ConfigMap]
}

func newMapIndex() *mapIndex { return &mapIndex{m: map[string]*queue.Entry[*corev1.ConfigMap]{}} }

func (x *mapIndex) Entry(key string) *queue.Entry[*corev1.ConfigMap] {
	if en := x.m[key]; en != nil {
		return en
	}
	en := queue.NewEntry[*corev1.ConfigMap](key)
	x.m[key] = en
	return en
}

func (x *mapIndex) EntryOf(obj *corev1.ConfigMap) *queue.Entry[*corev1.ConfigMap] {
	return x.Entry(obj.Namespace + "/" + obj.Name)
}

func (x *mapIndex) Lookup(key string) *queue.Entry[*corev1.ConfigMap] { return x.m[key] }

func (x *mapIndex) Release(en *queue.Entry[*corev1.ConfigMap]) {
	if _, known := en.Object(); !known && !en.Pending() && x.m[en.Key()] == en {
		delete(x.m, en.Key())
	}
}

// apply applies events, as a consumer that keeps objects does, to known and to the
// index's entries.
func (x *mapIndex) apply(known map[string]bool, events []ev) {
	for _, e := range events {
		en := x.Entry(e.Key)
		if e.Type == event.Deleted {
			delete(known, e.Key)
			en.ClearObject()
		} else {
			known[e.Key] = true
			en.SetObject(e.Object, e.Object.Namespace, 0, [16]byte{})
		}
	}
}

// FuzzIndexedFIFOMatchesMapFIFO pushes and pops random events of four keys through a
// FIFO that keeps its own map and one whose entries are an Index's (the event cache's
// arrangement), each with a consumer that applies what it pops, and checks that the two
// agree after every step: the same keys pending, in the same order, with the same events
// and marks, the same pops; and that the index holds an entry only for a key that is
// pending or whose object it keeps, so that entries of keys that come and go do not pile
// up.
func FuzzIndexedFIFOMatchesMapFIFO(f *testing.F) {
	fuzzseed.Add(f, "FuzzIndexedFIFOMatchesMapFIFO")
	f.Fuzz(func(t *testing.T, ops []byte) {
		known := map[string]bool{}
		plain := queue.NewFIFO(queue.Compress, func(key string, _ ev) bool { return known[key] })
		x := newMapIndex()
		indexedKnown := map[string]bool{}
		indexed := queue.NewIndexedFIFO[*corev1.ConfigMap](queue.Compress, x)
		for i, b := range ops {
			rv := strconv.Itoa(i + 1)
			name := string(rune('a' + b>>4%4))
			if op := int(b) % (len(fuzzEvents) + 1); op < len(fuzzEvents) {
				e := fuzzEvents[op](rv)
				e.Object = cm(name, rv)
				plain.Push("ns/"+name, e, b&0x80 != 0)
				indexed.Push("ns/"+name, e, b&0x80 != 0)
			} else {
				k1, got1, m1, ok1 := plain.Pop(nil)
				k2, got2, m2, ok2 := indexed.Pop(nil)
				if k1 != k2 || m1 != m2 || ok1 != ok2 || !cmp.Equal(got1, got2) {
					t.Fatalf("op %d: pops differ: map FIFO %q %v %v %v, indexed %q %v %v %v", i, k1, got1, m1, ok1, k2, got2, m2, ok2)
				}
				for j := range got1 {
					got1[j].Key, got2[j].Key = k1, k2
				}
				for _, e := range got1 {
					known[e.Key] = e.Type != event.Deleted
				}
				x.apply(indexedKnown, got2)
				queue.ReleaseRetiring(indexed)
			}
			if !cmp.Equal(plain.Keys(), indexed.Keys()) || plain.Len() != indexed.Len() || plain.Marked() != indexed.Marked() {
				t.Fatalf("op %d: map FIFO has %v (%d marked), indexed %v (%d marked)", i, plain.Keys(), plain.Marked(), indexed.Keys(), indexed.Marked())
			}
			for _, key := range plain.Keys() {
				if !cmp.Equal(plain.Pending(key).Events(), indexed.Pending(key).Events()) {
					t.Fatalf("op %d: %s pending differs: map FIFO %v, indexed %v", i, key, plain.Pending(key).Events(), indexed.Pending(key).Events())
				}
			}
			for key, en := range x.m {
				if _, ok := en.Object(); !ok && !en.Pending() {
					t.Fatalf("op %d: the index keeps an entry for %s, neither known nor pending", i, key)
				}
			}
		}
	})
}

// TestIndexedBacklogHandsEntryConsumersTheirKeysEntries checks queue.EntryConsumer: a
// consumer of a Backlog with an Index gets, with each batch, the entry of each of its keys
// in the batch's order, and entries whose key ends up neither known nor pending are
// released.
func TestIndexedBacklogHandsEntryConsumersTheirKeysEntries(t *testing.T) {
	x := newMapIndex()
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{Index: x})
	c := &entryConsumer{x: x}
	push(b, "a", "1", event.Added)
	push(b, "b", "2", event.Added)
	push(b, "a", "3", event.Modified)
	push(b, "c", "4", event.Added)
	push(b, "c", "5", event.Deleted) // c was never known: the two cancel out
	b.Seal()
	if n := b.Consume(c, 10); n != 2 {
		t.Fatalf("Consume took %d keys, want 2", n)
	}
	if want := [][]string{{"ns/a", "ns/b"}}; !cmp.Equal(c.keys, want) {
		t.Errorf("entries handed over: %v, want %v", c.keys, want)
	}
	if _, ok := x.m["ns/c"]; ok {
		t.Error("the entry of ns/c, whose events cancelled out, is still in the index")
	}
	push(b, "a", "6", event.Deleted)
	b.Consume(c, 10)
	if _, ok := x.m["ns/a"]; ok {
		t.Error("the entry of ns/a, deleted and applied, is still in the index")
	}
	if obj, ok := x.m["ns/b"].Object(); !ok || obj.ResourceVersion != "2" {
		t.Errorf("ns/b's entry holds %v, %v; want its object at resource version 2", obj, ok)
	}
}

// entryConsumer applies each batch to the entries it is handed, checking that they are
// those of the batch's keys.
type entryConsumer struct {
	x    *mapIndex
	keys [][]string
}

func (c *entryConsumer) Apply([]ev) ([]ev, []error) {
	panic("Apply called on an EntryConsumer of a Backlog with an Index")
}

func (c *entryConsumer) ApplyEntries(batch []ev, entries []*queue.Entry[*corev1.ConfigMap]) ([]ev, []error) {
	var keys []string
	for _, en := range entries {
		keys = append(keys, en.Key())
	}
	c.keys = append(c.keys, keys)
	k := 0
	for _, e := range batch {
		for k < len(entries) && entries[k].Key() != e.Key {
			k++
		}
		if k == len(entries) {
			return nil, []error{fmt.Errorf("no entry for %s among %v", e.Key, keys)}
		}
		if e.Type == event.Deleted {
			entries[k].ClearObject()
		} else {
			entries[k].SetObject(e.Object, e.Object.Namespace, 0, [16]byte{})
		}
	}
	return batch, nil
}

func (c *entryConsumer) Deliver([]ev) {}

func (c *entryConsumer) Report(errs []error) {
	for _, err := range errs {
		panic(err)
	}
}

// TestSortInDrainBoundsTheInboxWhateverTheDrainLoopDoes keeps DESIGN 4 with
// BacklogOptions.SortInDrain: pushes leave the sorting to the drain loop, but a drain loop
// stuck in a consumer's Deliver leaves at most MaxInboxDraining events (and one push) in
// the inbox, and with the drain loop held off by Between, or not running, at most
// MaxInbox, as without the option.
func TestSortInDrainBoundsTheInboxWhateverTheDrainLoopDoes(t *testing.T) {
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{SortInDrain: true})
	pushMany := func(n int) (most int) {
		for i := range n {
			push(b, fmt.Sprint("k", i%3), fmt.Sprint(i+1), event.Modified)
			most = max(most, queue.InboxLen(b))
		}
		return most
	}
	if most := pushMany(3 * queue.MaxInbox); most > queue.MaxInbox {
		t.Errorf("with no drain loop the inbox held %d events, more than %d", most, queue.MaxInbox)
	}

	stuck, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c := &consumer{onDeliver: func([]ev) {
		once.Do(func() { close(stuck); <-release })
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Drain(ctx, c) }()
	<-stuck
	if most := pushMany(3 * queue.MaxInboxDraining); most > queue.MaxInboxDraining {
		t.Errorf("with the drain loop stuck in Deliver the inbox held %d events, more than %d", most, queue.MaxInboxDraining)
	}
	if n := b.Len(); n != 3 {
		t.Errorf("Len() = %d after pushes over 3 keys, want 3", n)
	}
	close(release)

	b.Between(func() {
		if most := pushMany(3 * queue.MaxInbox); most > queue.MaxInbox {
			t.Errorf("with the drain loop held off by Between the inbox held %d events, more than %d", most, queue.MaxInbox)
		}
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Drain returned %v, want context.Canceled", err)
	}
}
