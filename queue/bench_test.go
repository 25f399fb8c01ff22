package queue_test

import (
	"math"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// BenchmarkBacklog measures a backlog's two ways in, each op followed by a drain:
// op=push pushes 10,000 modifications over 1,000 keys one at a time (ten per key, merged
// by the compression rules); op=update pushes 10,000 synchronization additions through
// one Update, as a new handler's initial state is.
func BenchmarkBacklog(b *testing.B) {
	const n, keys = 10_000, 1_000
	events, seed := make([]ev, n), make([]ev, n)
	for i := range events {
		k := strconv.Itoa(i % keys)
		events[i] = ev{Type: event.Modified, Key: "ns/" + k, Object: cm(k, strconv.Itoa(i+1))}
		k = strconv.Itoa(i)
		seed[i] = ev{Type: event.Added, Key: "ns/" + k, Object: cm(k, "1"), Sync: true}
	}
	drain := func(bl *queue.Backlog[*corev1.ConfigMap]) {
		for bl.Consume(discard{}, math.MaxInt) > 0 {
		}
	}
	b.Run("op=push", func(b *testing.B) {
		bl := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
		b.ReportAllocs()
		for range b.N {
			for _, e := range events {
				bl.Push(e)
			}
			drain(bl)
		}
	})
	b.Run("op=update", func(b *testing.B) {
		bl := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{})
		b.ReportAllocs()
		for range b.N {
			bl.Update(func(p queue.Pending[*corev1.ConfigMap]) {
				for _, e := range seed {
					p.Push(e)
				}
			})
			drain(bl)
		}
	})
}

// discard is a Consumer that drops what it is handed.
type discard struct{}

func (discard) Apply(batch []ev) ([]ev, []error) { return batch, nil }
func (discard) Deliver([]ev)                     {}
func (discard) Report([]error)                   {}
