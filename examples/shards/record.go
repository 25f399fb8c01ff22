package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/internal/testsupport/shardreplica"
	"github.com/typedinformer/typedinformer/typed"
)

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
	log shardreplica.Log // reconciles and changes

	mu        sync.Mutex
	handOvers []handOver
	moves     []move

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
func (r *record) reconcile(ctx context.Context, replica string, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
	defer r.count(replica).Add(1)
	return r.log.Reconcile(reconcileTime)(ctx, replica, req)
}

// unreconciled returns the changes that no reconcile ending after them saw (at their
// version or a later one), and the longest time from a change to the first reconcile
// that saw it.
func (r *record) unreconciled() (missed []shardreplica.Change, slowest time.Duration) {
	seen, missed := r.log.Seen()
	for c, rec := range seen {
		slowest = max(slowest, rec.End.Sub(c.At))
	}
	return missed, slowest
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
