package queue_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

type ev = event.Event[*corev1.ConfigMap]

func cm(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func add(rv string) ev { return ev{Type: event.Added, Object: cm("a", rv)} }
func mod(rv string) ev { return ev{Type: event.Modified, Object: cm("a", rv)} }
func del(rv string) ev { return ev{Type: event.Deleted, Object: cm("a", rv)} }
func syncAdd(rv string) ev {
	e := add(rv)
	e.Sync = true
	return e
}
func syncMod(rv string) ev {
	e := mod(rv)
	e.Sync = true
	return e
}
func unknownDel(rv string) ev {
	e := del(rv)
	e.Sync, e.FinalStateUnknown = true, true
	return e
}

func TestCompressionRules(t *testing.T) {
	tests := []struct {
		name        string
		known       bool // whether the consumer knows the key before the first event
		compression queue.Compression
		push        []ev
		want        []ev
	}{
		{name: "consecutive modifications keep the newest state", known: true,
			push: []ev{mod("1"), mod("2"), mod("3")}, want: []ev{mod("3")}},
		{name: "a modification after an addition keeps the addition with the newest state",
			push: []ev{add("1"), mod("2")}, want: []ev{add("2")}},
		{name: "a watch modification after a sync addition is not a sync event", known: true,
			push: []ev{syncAdd("1"), mod("2")}, want: []ev{{Type: event.Added, Object: cm("a", "2")}}},
		{name: "a duplicate or older state after a pending one is dropped", known: true,
			push: []ev{mod("5"), mod("5"), syncAdd("4")}, want: []ev{mod("5")}},
		{name: "two deletions collapse into the newer", known: true,
			push: []ev{del("1"), del("2")}, want: []ev{del("2")}},
		{name: "a deletion with a known final state wins over a later unknown one", known: true,
			push: []ev{del("5"), unknownDel("4")}, want: []ev{del("5")}},
		{name: "a deletion with a known final state replaces an earlier unknown one", known: true,
			push: []ev{unknownDel("4"), del("5")}, want: []ev{del("5")}},
		{name: "a sync modification after a pending deletion is dropped", known: true,
			push: []ev{del("2"), syncMod("1")}, want: []ev{del("2")}},
		{name: "a sync addition after a pending deletion is kept, the object is back", known: true,
			push: []ev{del("2"), syncAdd("3")}, want: []ev{del("2"), syncAdd("3")}},
		{name: "an addition then deletion of an unknown key cancels out",
			push: []ev{add("1"), mod("2"), del("3")}, want: nil},
		{name: "a modification then deletion of a known key is kept", known: true,
			push: []ev{mod("2"), del("3")}, want: []ev{mod("2"), del("3")}},
		{name: "a re-creation after a deletion of a known key is kept", known: true,
			push: []ev{mod("2"), del("3"), add("4"), mod("5")}, want: []ev{mod("2"), del("3"), add("5")}},
		{name: "a re-creation deleted again before delivery cancels out, the first deletion stays", known: true,
			push: []ev{mod("2"), del("3"), add("4"), del("5")}, want: []ev{mod("2"), del("3")}},
		{name: "a deletion of an unknown key with nothing pending is dropped",
			push: []ev{del("1")}, want: nil},
		{name: "a sync modification of an unknown key with nothing pending is dropped",
			push: []ev{syncMod("1")}, want: nil},
		{name: "full history keeps every modification", known: true, compression: queue.FullHistory,
			push: []ev{mod("1"), mod("2"), mod("3")}, want: []ev{mod("1"), mod("2"), mod("3")}},
		{name: "full history keeps an addition, its modifications and its deletion", compression: queue.FullHistory,
			push: []ev{add("1"), mod("2"), del("3")}, want: []ev{add("1"), mod("2"), del("3")}},
		{name: "full history still cancels an addition deleted at once", compression: queue.FullHistory,
			push: []ev{add("1"), del("2")}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := queue.NewFIFO(tt.compression, func(string, ev) bool { return tt.known })
			for _, e := range tt.push {
				f.Push("ns/a", e, false)
			}
			var got []ev
			if q := f.Pending("ns/a"); q != nil {
				got = q.Events()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("pending events (-want +got):\n%s", diff)
			}
			if len(tt.want) == 0 && f.Len() != 0 {
				t.Errorf("Len() = %d, want 0 for a cancelled key", f.Len())
			}
		})
	}
}

func TestFIFOAcrossKeysAndKeysKeepTheirPlace(t *testing.T) {
	f := queue.NewFIFO(queue.Compress, queue.KnownFromFirstEvent[*corev1.ConfigMap])
	push := func(name, rv string, typ event.Type) {
		o := cm(name, rv)
		f.Push("ns/"+name, ev{Type: typ, Object: o}, false)
	}
	push("a", "1", event.Added)
	push("b", "2", event.Added)
	push("c", "3", event.Added)
	push("a", "4", event.Modified) // a stays first
	push("b", "5", event.Deleted)  // b cancels out and leaves the line
	push("b", "6", event.Added)    // and comes back at the end

	type popped struct {
		Key string
		RVs []string
	}
	var got []popped
	for {
		key, events, _, ok := f.Pop(nil)
		if !ok {
			break
		}
		p := popped{Key: key}
		for _, e := range events {
			p.RVs = append(p.RVs, e.Object.ResourceVersion)
		}
		got = append(got, p)
	}
	want := []popped{{"ns/a", []string{"4"}}, {"ns/c", []string{"3"}}, {"ns/b", []string{"6"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pop order (-want +got):\n%s", diff)
	}
}

func TestMarkedKeysAreCountedUntilPoppedOrCancelled(t *testing.T) {
	f := queue.NewFIFO(queue.Compress, queue.KnownFromFirstEvent[*corev1.ConfigMap])
	f.Push("ns/a", ev{Type: event.Added, Object: cm("a", "1")}, true)
	f.Push("ns/b", ev{Type: event.Added, Object: cm("b", "1")}, true)
	f.Push("ns/c", ev{Type: event.Added, Object: cm("c", "1")}, false)
	f.Push("ns/a", ev{Type: event.Modified, Object: cm("a", "2")}, false)
	if got := f.Marked(); got != 2 {
		t.Fatalf("Marked() = %d, want 2", got)
	}
	f.Push("ns/b", ev{Type: event.Deleted, Object: cm("b", "2")}, false) // cancels b
	if got := f.Marked(); got != 1 {
		t.Fatalf("after cancelling b, Marked() = %d, want 1", got)
	}
	key, _, marked, _ := f.Pop(nil)
	if key != "ns/a" || !marked || f.Marked() != 0 {
		t.Fatalf("Pop() = %q marked=%v, Marked() = %d; want ns/a, true, 0", key, marked, f.Marked())
	}
}

func TestCompressedQueueNeverExceedsBound(t *testing.T) {
	f := queue.NewFIFO(queue.Compress, func(string, ev) bool { return true })
	types := []event.Type{event.Modified, event.Deleted, event.Added, event.Modified, event.Deleted, event.Added}
	for i := 0; i < 10000; i++ {
		f.Push("ns/a", ev{Type: types[i%len(types)], Object: cm("a", "x"), Sync: i%7 == 0}, false)
		if q := f.Pending("ns/a"); q != nil && len(q.Events()) > queue.MaxCompressedLen {
			t.Fatalf("after %d pushes the queue holds %d events, more than %d", i+1, len(q.Events()), queue.MaxCompressedLen)
		}
	}
}
