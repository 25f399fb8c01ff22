package perturb

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// serverWindow is a read perturbation on a Server: the in-memory window's rule (events
// more changes of the resource, or the deadline) counted on the writes the run's clients
// make, applied to the response bodies of the process's watches of gvr (gate).
type serverWindow struct {
	gvr     schema.GroupVersionResource
	window  window
	changes int
}

// openServerWindow starts a window on the server's watches of gvr, counting from its
// last write (last) or its next one. The caller holds r.mu.
func (r *run) openServerWindow(gvr schema.GroupVersionResource, drop, last bool, events int) {
	if r.win != nil {
		return
	}
	w := &serverWindow{gvr: gvr, window: window{drop: drop, events: events, deadline: time.Now().Add(r.h.opts.Window)}}
	if last {
		w.changes = 1
	}
	r.win = w
	r.winChangedLocked()
}

// winChangedLocked wakes the gates: a window opened or closed. The caller holds r.mu.
func (r *run) winChangedLocked() {
	close(r.winCh)
	r.winCh = make(chan struct{})
}

// countServerChange counts a successful write of gvr against the window, closing it once
// it has seen its changes. The caller holds r.mu.
func (r *run) countServerChange(gvr schema.GroupVersionResource) {
	if w := r.win; w != nil && w.gvr == gvr {
		w.changes++
		if w.window.over(w.changes) {
			r.closeServerWindowLocked()
		}
	}
}

// closeServerWindowLocked ends the window: the gates deliver what they held, or end their
// watches with 410 Gone. The caller holds r.mu.
func (r *run) closeServerWindowLocked() {
	r.win = nil
	r.last = time.Now() // what the window held back is delivered now: the controller acts on it
	r.winChangedLocked()
}

// expireServerWindow closes the window past its deadline and reports whether one is
// still open.
func (r *run) expireServerWindow() (open bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.win != nil && time.Now().After(r.win.window.deadline) {
		r.closeServerWindowLocked()
	}
	return r.win != nil
}

// rawEvent is a watch event as the server's JSON stream frames it.
type rawEvent struct {
	Type   watch.EventType `json:"type"`
	Object json.RawMessage `json:"object"`
}

// gone is what a watch that lost events in a window ends with, as a server whose watch
// cache no longer has the watch's resource version answers, framed with its newline.
// Gates write it as it is: appending to a shared slice would write into its spare
// capacity from every gate at once.
var gone = func() []byte {
	status := apierrors.NewResourceExpired("perturb: the watch was disconnected; too old resource version").ErrStatus
	status.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"} // as the server sends it, for decoders that need the kind
	b, _ := json.Marshal(metav1.WatchEvent{Type: string(watch.Error), Object: runtime.RawExtension{Object: &status}})
	return append(b, '\n')
}()

// gate returns the body of a process's watch of gvr as the window lets it through: in a
// lag the events (bookmarks too, which must not run ahead of them) that came while it was
// open are held until it closes; in a disconnection they are dropped, and when it closes
// the watch ends with 410 Gone, so its cache relists.
func (r *run) gate(gvr schema.GroupVersionResource, body io.ReadCloser) io.ReadCloser {
	pr, pw := io.Pipe()
	events := make(chan rawEvent)
	done := make(chan struct{})
	g := &gated{PipeReader: pr, closed: make(chan struct{})}
	go func() {
		defer close(events)
		dec := json.NewDecoder(body)
		for {
			var e rawEvent
			if dec.Decode(&e) != nil {
				return
			}
			select {
			case events <- e:
			case <-done:
				return
			}
		}
	}()
	go func() {
		defer func() {
			close(done)
			body.Close() // ends the decoder's read
		}()
		var held []rawEvent
		var within *serverWindow // the window this watch has seen open, if any
		write := func(e rawEvent) bool {
			b, err := json.Marshal(e)
			if err == nil {
				_, err = pw.Write(append(b, '\n'))
			}
			return err == nil
		}
		for {
			r.mu.Lock()
			w, woke := r.win, r.winCh
			r.mu.Unlock()
			if w != nil && w.gvr != gvr {
				w = nil
			}
			if within != nil && w != within {
				if within.window.drop {
					_, _ = pw.Write(gone)
					pw.Close()
					return
				}
				for _, e := range held {
					if !write(e) {
						return
					}
				}
				held = nil
			}
			within = w
			select {
			case e, ok := <-events:
				switch {
				case !ok:
					pw.Close()
					return
				case w == nil:
					if !write(e) {
						return
					}
				case !w.window.drop:
					held = append(held, e)
				}
			case <-woke:
			case <-g.closed:
				return
			}
		}
	}()
	return g
}

// gated is a gate's body: closing it ends the gate and the server's watch.
type gated struct {
	*io.PipeReader
	closed chan struct{}
	once   sync.Once
}

func (g *gated) Close() error {
	g.once.Do(func() { close(g.closed) })
	return g.PipeReader.Close()
}

// watchJSON asks for a watch's events in JSON, the form gate reads.
func watchJSON(req *http.Request) *http.Request {
	req = req.Clone(req.Context())
	req.Header.Set("Accept", "application/json")
	return req
}
