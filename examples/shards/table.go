package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/typedinformer/typedinformer/internal/testsupport/shardreplica"
)

// table prints one line per second: the time since the replicas started and, for each
// replica, its shards, its cached objects, its reconciles in that second and the KB it
// has received, then what happened in that second.
type table struct {
	names []string // every replica the demo will start, in order
	rec   *record
	start time.Time

	mu       sync.Mutex
	replicas map[string]*shardreplica.Replica
	events   []string
	last     map[string]int64 // reconciles counted at the last line
	lines    int
}

// block is the format of one replica's columns, blockWidth their width.
const (
	block      = "| %6d %5d %5d %5d "
	blockWidth = 2 + 6 + 1 + 5 + 1 + 5 + 1 + 5 + 1
)

func newTable(names []string, rec *record) *table {
	return &table{names: names, rec: rec, replicas: map[string]*shardreplica.Replica{}, last: map[string]int64{}}
}

// add starts showing a replica.
func (t *table) add(r *shardreplica.Replica) {
	t.mu.Lock()
	t.replicas[r.Name] = r
	t.mu.Unlock()
}

// event is shown at the end of the next line.
func (t *table) event(format string, args ...any) {
	t.mu.Lock()
	t.events = append(t.events, fmt.Sprintf(format, args...))
	t.mu.Unlock()
}

func (t *table) header() {
	fmt.Println("each second, for each replica: shards it holds, objects in its caches, reconciles in that second,")
	fmt.Println("and KB received from the API server since it started; then what happened in that second")
	var names, columns strings.Builder
	fmt.Fprintf(&names, "%5s ", "")
	fmt.Fprintf(&columns, "%5s ", "time")
	for _, n := range t.names {
		fmt.Fprintf(&names, "| %-*s", blockWidth-2, n)
		fmt.Fprintf(&columns, "| %6s %5s %5s %5s ", "shards", "objs", "rec", "KB")
	}
	fmt.Fprintf(&columns, "| %s", "event")
	fmt.Println(strings.TrimRight(names.String(), " "))
	fmt.Println(columns.String())
}

// line prints the line of the second that just ended.
func (t *table) line(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%4ds ", int(now.Sub(t.start).Round(time.Second)/time.Second))
	for _, n := range t.names {
		r, ok := t.replicas[n]
		if !ok {
			fmt.Fprintf(&b, "| %*s", blockWidth-2, "")
			continue
		}
		objects := 0
		for _, c := range r.Loop.Cached() {
			objects += c
		}
		count := t.rec.count(n).Load()
		fmt.Fprintf(&b, block, len(r.Sharder.Held()), objects, count-t.last[n], r.BytesReceived()/1024)
		t.last[n] = count
	}
	fmt.Fprintf(&b, "| %s", strings.Join(t.events, "; "))
	t.events = nil
	fmt.Println(strings.TrimRight(b.String(), " |"))
	t.lines++
}

// run prints a line every second from t.start until stop is closed, and the line of the
// second in which it was closed.
func (t *table) run(stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			t.line(<-tick.C)
			return
		case now := <-tick.C:
			t.line(now)
		}
	}
}
