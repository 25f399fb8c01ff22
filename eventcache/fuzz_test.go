package eventcache

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// checkingSink checks, as a handler would, that every delivered event is consistent with
// the ones before it: additions only for keys it does not know, modifications and
// deletions only for keys it knows, each carrying the previous delivered state as prior,
// and resource versions that never go back for a key.
type checkingSink struct {
	t     *testing.T
	state map[string]obj
	maxRV map[string]int
}

func (s *checkingSink) Deliver(key string, e ev) {
	prev, known := s.state[key]
	switch e.Type {
	case event.Added:
		if known {
			s.t.Fatalf("%s: Added for a key the handler knows", key)
		}
		s.state[key] = e.Object
	case event.Modified:
		if !known || e.Prior != prev {
			s.t.Fatalf("%s: Modified with prior %v, handler knows %v (known=%v)", key, e.Prior, prev, known)
		}
		s.state[key] = e.Object
	case event.Deleted:
		if !known || e.Prior != prev {
			s.t.Fatalf("%s: Deleted with prior %v, handler knows %v (known=%v)", key, e.Prior, prev, known)
		}
		delete(s.state, key)
	}
	rv, _ := strconv.Atoi(e.Object.ResourceVersion)
	if rv < s.maxRV[key] {
		s.t.Fatalf("%s: %v went back from resource version %d", key, e, s.maxRV[key])
	}
	s.maxRV[key] = rv
}

// FuzzEventQueueCollection drives a collection with random Add, Replace, Synchronize and
// drain sequences and checks it against a reference model that applies every operation
// in order with no queues: after a full drain the known objects equal the model (nothing
// lost, nothing resurrected), every delivery is consistent per key, and no key's queue
// grows past the compression bound.
func FuzzEventQueueCollection(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "testdata", "fuzz", "eventqueuecollection", "*.hex"))
	for _, name := range seeds {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		f.Add(seed)
	}
	if len(seeds) == 0 {
		f.Fatal("no seed corpus in testdata/fuzz/eventqueuecollection")
	}
	keys := []string{"a", "b", "c", "d", "e"}
	f.Fuzz(func(t *testing.T, ops []byte) {
		w := NewWriter[obj](nil)
		sink := &checkingSink{t: t, state: map[string]obj{}, maxRV: map[string]int{}}
		c := NewEventQueueCollection(w.Store(), Options[obj]{})
		rtc := NewResourceTrackingConsumer[obj](w, sink, nil)
		model := map[string]obj{}
		rv := 0
		next := func() string { rv++; return strconv.Itoa(rv) }
		drainAll := func() {
			c.mu.Lock()
			for c.consumeOne(rtc) {
			}
			c.mu.Unlock()
			got := map[string]obj{}
			w.Store().Range(func(k string, o obj) bool { got[k] = o; return true })
			if diff := cmp.Diff(model, got); diff != "" {
				t.Fatalf("known objects differ from the model (-model +known):\n%s", diff)
			}
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%7, ops[i+1]
			key := keys[int(arg)%len(keys)]
			switch op {
			case 0, 1, 2:
				typ := []event.Type{event.Added, event.Modified, event.Deleted}[op]
				o := cm(key, next())
				if err := c.Add(ev{Type: typ, Object: o}); err != nil {
					t.Fatal(err)
				}
				if typ == event.Deleted {
					delete(model, "ns/"+key)
				} else {
					model["ns/"+key] = o
				}
			case 3:
				var list []obj
				model = map[string]obj{}
				for j, k := range keys {
					if arg&(1<<j) != 0 {
						o := cm(k, next())
						list = append(list, o)
						model["ns/"+k] = o
					}
				}
				if err := c.Replace(list, strconv.Itoa(rv)); err != nil {
					t.Fatal(err)
				}
			case 4:
				if err := c.Synchronize(); err != nil {
					t.Fatal(err)
				}
			case 5:
				for j := 0; j <= int(arg)%3; j++ {
					c.mu.Lock()
					c.consumeOne(rtc)
					c.mu.Unlock()
				}
			case 6:
				drainAll()
			}
			c.mu.Lock()
			for _, k := range c.fifo.Keys() {
				if n := len(c.fifo.Pending(k).Events()); n > queue.MaxCompressedLen {
					c.mu.Unlock()
					t.Fatalf("key %s holds %d pending events, more than %d", k, n, queue.MaxCompressedLen)
				}
			}
			c.mu.Unlock()
		}
		drainAll()
	})
}
