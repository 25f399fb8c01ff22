package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/typed"
)

// reconcile is one reconcile: which replica, which key, which version of the object (its
// data "v"), when it started and ended.
type reconcile struct {
	replica, key string
	version      int
	start, end   time.Time
}

// change is one write of the churn: key got version at a time.
type change struct {
	key     string
	version int
	at      time.Time
}

// handOver is one shard.Metrics.HandOver call: a replica took a shard over, d after it
// decided to.
type handOver struct {
	replica string
	shard   int
	d       time.Duration
	at      time.Time
}

// move is one shard.Metrics.ShardMoved call: a replica started (gained) or stopped
// working on a shard.
type move struct {
	replica string
	shard   int
	gained  bool
	at      time.Time
}

// record is what the demo records of every replica, for the table and the summary.
type record struct {
	mu         sync.Mutex
	reconciles []reconcile
	changes    []change
	handOvers  []handOver
	moves      []move

	countsMu sync.Mutex
	counts   map[string]*atomic.Int64 // reconciles per replica, for the table
}

func newRecord() *record { return &record{counts: map[string]*atomic.Int64{}} }

// count returns the counter of replica's reconciles.
func (r *record) count(replica string) *atomic.Int64 {
	r.countsMu.Lock()
	defer r.countsMu.Unlock()
	c, ok := r.counts[replica]
	if !ok {
		c = &atomic.Int64{}
		r.counts[replica] = c
	}
	return c
}

// reconcile is the replicas' reconciler: it takes reconcileTime, as if it did some work,
// and records itself.
func (r *record) reconcile(_ context.Context, replica string, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
	rec := reconcile{replica: replica, key: req.Key, version: -1, start: time.Now()}
	if req.Object != nil {
		rec.version, _ = strconv.Atoi(req.Object.Data["v"])
	}
	time.Sleep(reconcileTime)
	rec.end = time.Now()
	r.mu.Lock()
	r.reconciles = append(r.reconciles, rec)
	r.mu.Unlock()
	r.count(replica).Add(1)
	return typed.Result{}, nil
}

func (r *record) changed(c change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
}

// reconciledAll reports whether every key has been reconciled at least once.
func (r *record) reconciledAll(keys []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]bool, len(keys))
	for _, rec := range r.reconciles {
		seen[rec.key] = true
	}
	for _, k := range keys {
		if !seen[k] {
			return false
		}
	}
	return true
}

// unreconciled returns the changes that no reconcile ending after them saw (at their
// version or a later one), and the longest time from a change to the first reconcile
// that saw it.
func (r *record) unreconciled() (missed []change, slowest time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := map[string][]reconcile{}
	for _, rec := range r.reconciles {
		byKey[rec.key] = append(byKey[rec.key], rec)
	}
	for _, c := range r.changes {
		first := time.Duration(-1)
		for _, rec := range byKey[c.key] {
			if rec.version >= c.version && rec.end.After(c.at) {
				if d := rec.end.Sub(c.at); first < 0 || d < first {
					first = d
				}
			}
		}
		if first < 0 {
			missed = append(missed, c)
			continue
		}
		slowest = max(slowest, first)
	}
	return missed, slowest
}

// overlaps returns the keys that two replicas reconciled at once, as the end-to-end
// test checks: the reconciles of one key by different replicas never overlap in time.
func (r *record) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := map[string][]reconcile{}
	for _, rec := range r.reconciles {
		byKey[rec.key] = append(byKey[rec.key], rec)
	}
	var out []string
	for key, rs := range byKey {
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if a.replica != b.replica && a.start.Before(b.end) && b.start.Before(a.end) {
					out = append(out, fmt.Sprintf("%s by %s [%s, %s] and %s [%s, %s]", key,
						a.replica, a.start.Format(time.StampMicro), a.end.Format(time.StampMicro),
						b.replica, b.start.Format(time.StampMicro), b.end.Format(time.StampMicro)))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// between returns the hand-overs and the shards gained in [from, to).
func (r *record) between(from, to time.Time) (hs []time.Duration, gained int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.handOvers {
		if !h.at.Before(from) && h.at.Before(to) {
			hs = append(hs, h.d)
		}
	}
	for _, m := range r.moves {
		if m.gained && !m.at.Before(from) && m.at.Before(to) {
			gained++
		}
	}
	slices.Sort(hs)
	return hs, gained
}

// metrics is the shard.Metrics of one replica: the Metrics interface is told the group
// and the shard, not the replica, so each replica gets its own.
type metrics struct {
	replica string
	r       *record
}

func (m metrics) ShardsHeld(string, int)        {}
func (m metrics) ShardObjects(string, int, int) {}
func (m metrics) ShardKeys(string, int, int)    {}

func (m metrics) ShardMoved(_ string, shard int, gained bool) {
	m.r.mu.Lock()
	m.r.moves = append(m.r.moves, move{replica: m.replica, shard: shard, gained: gained, at: time.Now()})
	m.r.mu.Unlock()
}

func (m metrics) HandOver(_ string, shard int, d time.Duration) {
	m.r.mu.Lock()
	m.r.handOvers = append(m.r.handOvers, handOver{replica: m.replica, shard: shard, d: d, at: time.Now()})
	m.r.mu.Unlock()
}
