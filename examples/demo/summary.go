package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
)

// metrics implements controller.Metrics with a few atomics: the library has no metrics
// dependency, and this is all an adapter needs.
type metrics struct {
	lists, listed, watchEvents, errors atomic.Int64
	maxDepth                           atomic.Int64
	handled, latencyNS, maxLatencyNS   atomic.Int64
	panics                             atomic.Int64
	lastRV                             atomic.Pointer[string]
}

func (m *metrics) Listed(items int, _ time.Duration) { m.lists.Add(1); m.listed.Add(int64(items)) }
func (m *metrics) WatchEvent(watch.EventType)        { m.watchEvents.Add(1) }
func (m *metrics) ResourceVersion(rv string)         { m.lastRV.Store(&rv) }
func (m *metrics) Error()                            { m.errors.Add(1) }
func (m *metrics) QueueDepth(keys int)               { storeMax(&m.maxDepth, int64(keys)) }
func (m *metrics) HandlerPanic(string)               { m.panics.Add(1) }
func (m *metrics) HandlerLatency(_ string, d time.Duration) {
	m.handled.Add(1)
	m.latencyNS.Add(int64(d))
	storeMax(&m.maxLatencyNS, int64(d))
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// errorCounter counts the errors the controller reports.
type errorCounter struct{ n atomic.Int64 }

func (c *errorCounter) add()       { c.n.Add(1) }
func (c *errorCounter) get() int64 { return c.n.Load() }

// convergence is the final comparison of the controller's cache with the server.
type convergence struct {
	equal     bool
	cacheLen  int
	serverLen int
	after     time.Duration // from the end of the writes until cache, handler and server agreed
	detail    string        // how they differ, when they do
}

// waitConverged lists the namespace's ConfigMaps from the server, fresh, and compares the
// keys and resource versions with the controller's cache and with the handler's view,
// until all three agree or timeout passes. The writes are over by then, so the server's
// state is final and the cache can only be catching up.
func waitConverged(ctx context.Context, client typedcorev1.ConfigMapInterface, store *eventcache.Store[*corev1.ConfigMap], rec *recorder, timeout time.Duration) (convergence, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return convergence{}, fmt.Errorf("listing ConfigMaps from the server: %w", err)
		}
		server := map[string]string{}
		for i := range list.Items {
			server[list.Items[i].Namespace+"/"+list.Items[i].Name] = list.Items[i].ResourceVersion
		}
		cache := map[string]string{}
		store.Range(func(key string, cm *corev1.ConfigMap) bool {
			cache[key] = cm.ResourceVersion
			return true
		})
		c := convergence{cacheLen: len(cache), serverLen: len(server), after: time.Since(start)}
		d1 := diffViews("cache", cache, server)
		d2 := diffViews("handler", rec.handlerView(), server)
		if d1 == "" && d2 == "" {
			c.equal = true
			return c, nil
		}
		c.detail = strings.TrimPrefix(d1+"; "+d2, "; ")
		if time.Now().After(deadline) {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// diffViews describes how a view of key → resource version differs from the server's,
// naming at most a few keys; "" when they are equal.
func diffViews(name string, view, server map[string]string) string {
	var missing, extra, stale []string
	for k, rv := range server {
		switch v, ok := view[k]; {
		case !ok:
			missing = append(missing, k)
		case v != rv:
			stale = append(stale, fmt.Sprintf("%s (rv %s, server %s)", k, v, rv))
		}
	}
	for k := range view {
		if _, ok := server[k]; !ok {
			extra = append(extra, k)
		}
	}
	var parts []string
	for _, d := range []struct {
		what string
		keys []string
	}{{"missing", missing}, {"not on the server", extra}, {"out of date", stale}} {
		if len(d.keys) == 0 {
			continue
		}
		n := len(d.keys)
		slices.Sort(d.keys)
		more := ""
		if n > 3 {
			more = fmt.Sprintf(" and %d more", n-3)
			d.keys = d.keys[:3]
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s%s)", n, d.what, strings.Join(d.keys, ", "), more))
	}
	if len(parts) == 0 {
		return ""
	}
	return name + ": " + strings.Join(parts, ", ")
}

// colorCounts reads the "color" index of the cache.
func colorCounts(store *eventcache.Store[*corev1.ConfigMap]) string {
	values, err := store.IndexValues("color")
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, v := range values {
		objs, _ := store.ByIndex("color", v)
		parts = append(parts, fmt.Sprintf("%s=%d", v, len(objs)))
	}
	return strings.Join(parts, " ")
}

// summary is everything the demo reports at the end.
type summary struct {
	cluster            string
	precreated, listed int
	plan               plan
	workers            int
	writeTime          time.Duration
	staleReads         int64
	stats              stats
	synced             time.Duration
	handlerSynced      time.Duration
	churnStart         time.Time
	metrics            *metrics
	errors             int64
	conv               convergence
	colors             string
	regSynced          bool
	regPending         int
	stopTime           time.Duration
}

func (s summary) print(w io.Writer) {
	st, m := s.stats, s.metrics
	row := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-18s %s\n", label, fmt.Sprintf(format, args...))
	}
	fmt.Fprintln(w, "── summary ──")
	row("cluster", "%s", s.cluster)
	row("initial list", "%d objects (%d pre-created)", s.listed, s.precreated)
	row("writes", "%d creates + %d updates + %d deletes = %d in %s with %d workers (%.0f/s)",
		s.plan.creates, s.plan.updates, s.plan.deletes, s.plan.total(), round(s.writeTime), s.workers,
		float64(s.plan.total())/s.writeTime.Seconds())
	row("", "%d updates found the cache behind and re-read the object from the server", s.staleReads)
	row("events", "%d: %d ADDED, %d MODIFIED, %d DELETED", st.total,
		st.byType[event.Added], st.byType[event.Modified], st.byType[event.Deleted])
	row("", "%d sync (from a list), %d final-state-unknown", st.sync, st.fsu)
	row("time to sync", "%s from Run to HasSynced; the handler had processed the initial list after %s",
		round(s.synced), round(s.handlerSynced))
	churnTime := st.last.Sub(s.churnStart)
	rate := 0.0
	if churnTime > 0 {
		rate = float64(st.churnN) / churnTime.Seconds()
	}
	row("churn", "%d events in %s = %.0f events/s (writes start to last event handled)", st.churnN, round(churnTime), rate)
	avg := time.Duration(0)
	if n := m.handled.Load(); n > 0 {
		avg = time.Duration(m.latencyNS.Load() / n)
	}
	lastRV := ""
	if p := m.lastRV.Load(); p != nil {
		lastRV = *p
	}
	row("pipeline", "%d list(s) of %d items, %d watch events, %d errors, max queue depth %d keys",
		m.lists.Load(), m.listed.Load(), m.watchEvents.Load(), s.errors, m.maxDepth.Load())
	row("", "handler latency avg %s max %s, %d panics, last resource version %s",
		round(avg), round(time.Duration(m.maxLatencyNS.Load())), m.panics.Load(), lastRV)
	verdict := "equal, with the same resource versions"
	if !s.conv.equal {
		verdict = "NOT EQUAL: " + s.conv.detail
	}
	row("cache vs server", "%d in the cache, %d from a fresh List: %s (checked %s after the writes)",
		s.conv.cacheLen, s.conv.serverLen, verdict, round(s.conv.after))
	row("index \"color\"", "%s", s.colors)
	row("handler", "Registration.HasSynced=%t, %d keys pending", s.regSynced, s.regPending)
	row("stop", "the controller stopped in %s", round(s.stopTime))
}
