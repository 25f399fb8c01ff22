package main

import (
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/event"
)

// recorder is the demo's handler: it prints each event and counts everything, and keeps
// the handler's own view of every key's resource version, which shows that every change
// was delivered and not only cached.
type recorder struct {
	out   *printer
	start time.Time // when Run was called; set before the controller starts

	mu        sync.Mutex
	byType    map[event.Type]int
	syncAdded int // sync additions: the objects of the lists
	sync, fsu int
	churn     bool
	churnN    int       // events handled since the churn started
	last      time.Time // when the newest event was handled
	view      map[string]string
}

// stats is a copy of a recorder's counters.
type stats struct {
	byType    map[event.Type]int
	syncAdded int
	sync, fsu int
	churnN    int
	last      time.Time
	total     int
}

func newRecorder(out *printer) *recorder {
	return &recorder{out: out, byType: map[event.Type]int{}, view: map[string]string{}}
}

// handle runs on the handler's goroutine, one event at a time.
func (r *recorder) handle(e event.Event[*corev1.ConfigMap]) {
	now := time.Now()
	key, err := event.ObjectKey(e.Object)
	if err != nil { // the pipeline rejects unnamed objects, so this is a library bug
		key = "<" + err.Error() + ">"
	}
	r.mu.Lock()
	r.byType[e.Type]++
	if e.Sync {
		r.sync++
		if e.Type == event.Added {
			r.syncAdded++
		}
	}
	if e.FinalStateUnknown {
		r.fsu++
	}
	if r.churn {
		r.churnN++
	}
	r.last = now
	if e.Type == event.Deleted {
		delete(r.view, key)
	} else {
		r.view[key] = e.Object.ResourceVersion
	}
	r.mu.Unlock()
	r.out.line(formatEvent(now.Sub(r.start), key, e))
}

func (r *recorder) startChurn() {
	r.mu.Lock()
	r.churn = true
	r.mu.Unlock()
}

func (r *recorder) snapshot() stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := stats{byType: map[event.Type]int{}, syncAdded: r.syncAdded, sync: r.sync, fsu: r.fsu, churnN: r.churnN, last: r.last}
	for t, n := range r.byType {
		s.byType[t] = n
		s.total += n
	}
	return s
}

// handlerView returns a copy of the handler's key → resource version map.
func (r *recorder) handlerView() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.view)
}
