package perturb

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// serverEvent is a watch event of the server's JSON stream, of a ConfigMap at rv.
func serverEvent(typ watch.EventType, rv int) string {
	return fmt.Sprintf(`{"type":%q,"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web","resourceVersion":"%d"}}}`+"\n", typ, rv)
}

// gatedRun is a run on a Server as far as the gate needs one, and a watch of ConfigMaps
// through its gate (see gatedWatch).
func gatedRun(t *testing.T) (r *run, send func(string), next func() (string, bool)) {
	t.Helper()
	r = &run{h: &harness{opts: Options{Window: time.Minute}}, winCh: make(chan struct{})}
	send, next = gatedWatch(t, r)
	return r, send, next
}

// gatedWatch is a watch of ConfigMaps through r's gate: what the server sends goes to
// send, what the cache reads comes from next.
func gatedWatch(t *testing.T, r *run) (send func(string), next func() (string, bool)) {
	t.Helper()
	server, w := io.Pipe()
	body := r.gate(configMaps, server)
	t.Cleanup(func() { body.Close(); w.Close() })
	events := make(chan string)
	go func() {
		defer close(events)
		dec := json.NewDecoder(body)
		for {
			var e metav1.WatchEvent
			if dec.Decode(&e) != nil {
				return
			}
			var m struct {
				Kind, Code any
				Metadata   struct{ ResourceVersion string }
			}
			_ = json.Unmarshal(e.Object.Raw, &m)
			events <- fmt.Sprintf("%s %v@%s%v", e.Type, m.Kind, m.Metadata.ResourceVersion, m.Code)
		}
	}()
	send = func(s string) {
		if _, err := io.WriteString(w, s); err != nil {
			t.Fatal(err)
		}
	}
	next = func() (string, bool) {
		select {
		case e, ok := <-events:
			return e, ok
		case <-time.After(100 * time.Millisecond):
			return "", true
		}
	}
	return send, next
}

func TestServerWatchesLagAndDisconnectAtTheTransport(t *testing.T) {
	t.Run("a lag holds events and bookmarks until its changes were made, then delivers them in order", func(t *testing.T) {
		r, send, next := gatedRun(t)
		send(serverEvent(watch.Added, 1))
		if e, _ := next(); e != "ADDED ConfigMap@1<nil>" {
			t.Fatalf("before the window: %q", e)
		}
		r.mu.Lock()
		r.openServerWindow(configMaps, false, true, 2) // the write that opened it counts
		r.mu.Unlock()
		send(serverEvent(watch.Modified, 2))
		send(serverEvent(watch.Bookmark, 3))
		r.mu.Lock()
		r.countServerChange(configMaps)
		r.mu.Unlock()
		if e, _ := next(); e != "" {
			t.Fatalf("within the window: %q delivered", e)
		}
		r.mu.Lock()
		r.countServerChange(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}) // not the window's
		r.countServerChange(configMaps)                                                      // the window's second change after its first
		r.mu.Unlock()
		for _, want := range []string{"MODIFIED ConfigMap@2<nil>", "BOOKMARK ConfigMap@3<nil>"} {
			if e, _ := next(); e != want {
				t.Fatalf("after the window: %q; want %q", e, want)
			}
		}
		send(serverEvent(watch.Modified, 4))
		if e, _ := next(); e != "MODIFIED ConfigMap@4<nil>" {
			t.Fatalf("after the window: %q", e)
		}
	})
	t.Run("a disconnection drops what comes and ends the watch with 410 Gone when it closes", func(t *testing.T) {
		r, send, next := gatedRun(t)
		r.mu.Lock()
		r.openServerWindow(configMaps, true, false, 5)
		r.mu.Unlock()
		send(serverEvent(watch.Added, 1))
		send(serverEvent(watch.Bookmark, 2))
		if e, _ := next(); e != "" {
			t.Fatalf("within the window: %q delivered", e)
		}
		r.mu.Lock()
		r.win.window.deadline = time.Now()
		r.mu.Unlock()
		if r.expireServerWindow() {
			t.Fatal("the window is still open past its deadline")
		}
		if e, _ := next(); e != "ERROR Status@410" {
			t.Fatalf("at the window's end: %q; want the 410 Gone", e)
		}
		if e, ok := next(); ok {
			t.Fatalf("after the 410: %q; want the watch ended", e)
		}
	})
	t.Run("watches a disconnection ends at once each get their 410 Gone", func(t *testing.T) {
		// A cache's watch and a probe for progress watch the same resource; their gates
		// end together when the window closes (a data race on the shared 410 event once).
		r, send, next := gatedRun(t)
		send2, next2 := gatedWatch(t, r)
		r.mu.Lock()
		r.openServerWindow(configMaps, true, false, 5)
		r.mu.Unlock()
		send(serverEvent(watch.Added, 1)) // dropped: each gate has seen the window open
		send2(serverEvent(watch.Added, 1))
		if e, _ := next(); e != "" {
			t.Fatalf("within the window: %q delivered", e)
		}
		if e, _ := next2(); e != "" {
			t.Fatalf("within the window: %q delivered", e)
		}
		r.mu.Lock()
		r.closeServerWindowLocked()
		r.mu.Unlock()
		for _, next := range []func() (string, bool){next, next2} {
			if e, _ := next(); e != "ERROR Status@410" {
				t.Fatalf("at the window's end: %q; want the 410 Gone", e)
			}
		}
	})
}
