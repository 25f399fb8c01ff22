package shardreplica

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/typed"
)

// Reconcile is one reconcile: which replica, which key, which version of the object
// (its data "v", -1 for a deleted one), when it started and ended.
type Reconcile struct {
	Replica, Key string
	Version      int
	Start, End   time.Time
}

// Change is one write: Key got Version at At.
type Change struct {
	Key     string
	Version int
	At      time.Time
}

// Log records the reconciles of every replica and the changes written, and checks the
// sharding guarantees on them. It is safe for concurrent use.
type Log struct {
	mu         sync.Mutex
	reconciles []Reconcile
	changes    []Change
}

// Reconcile is a Config.Reconcile that takes work, as if it did some, and records the
// reconcile.
func (l *Log) Reconcile(work time.Duration) func(context.Context, string, typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
	return func(_ context.Context, replica string, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
		r := Reconcile{Replica: replica, Key: req.Key, Version: -1, Start: time.Now()}
		if req.Object != nil {
			r.Version, _ = strconv.Atoi(req.Object.Data["v"])
		}
		time.Sleep(work)
		r.End = time.Now()
		l.mu.Lock()
		l.reconciles = append(l.reconciles, r)
		l.mu.Unlock()
		return typed.Result{}, nil
	}
}

// Changed records a write.
func (l *Log) Changed(c Change) {
	l.mu.Lock()
	l.changes = append(l.changes, c)
	l.mu.Unlock()
}

// Reconciles returns the reconciles recorded so far.
func (l *Log) Reconciles() []Reconcile {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reconciles)
}

// ReconciledAtLeast reports whether every key has been reconciled at version v or later.
func (l *Log) ReconciledAtLeast(keys []string, v int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(map[string]bool, len(keys))
	for _, r := range l.reconciles {
		if r.Version >= v {
			seen[r.Key] = true
		}
	}
	for _, k := range keys {
		if !seen[k] {
			return false
		}
	}
	return true
}

// Seen pairs each change with the first reconcile that saw it: of its key, ending after
// it, at its version or a later one. Changes no reconcile saw are in missed.
func (l *Log) Seen() (seen map[Change]Reconcile, missed []Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	byKey := map[string][]Reconcile{}
	for _, r := range l.reconciles {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	seen = make(map[Change]Reconcile, len(l.changes))
	for _, c := range l.changes {
		found := false
		var first Reconcile
		for _, r := range byKey[c.Key] {
			if r.Version >= c.Version && r.End.After(c.At) && (!found || r.End.Before(first.End)) {
				first, found = r, true
			}
		}
		if found {
			seen[c] = first
		} else {
			missed = append(missed, c)
		}
	}
	return seen, missed
}

// Overlaps returns, in order, the reconciles of one key by two replicas at once, which
// sharding must never allow.
func (l *Log) Overlaps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	byKey := map[string][]Reconcile{}
	for _, r := range l.reconciles {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	var out []string
	for key, rs := range byKey {
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if a.Replica != b.Replica && a.Start.Before(b.End) && b.Start.Before(a.End) {
					out = append(out, fmt.Sprintf("%s by %s [%s, %s] and %s [%s, %s]", key,
						a.Replica, a.Start.Format(time.StampMicro), a.End.Format(time.StampMicro),
						b.Replica, b.Start.Format(time.StampMicro), b.End.Format(time.StampMicro)))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
