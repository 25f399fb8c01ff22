package queue_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// printer is a Consumer that prints what it is handed.
type printer struct{}

func (printer) Apply(batch []ev) ([]ev, []error) { return batch, nil }

func (printer) Deliver(batch []ev) {
	for _, e := range batch {
		fmt.Println(e.Key, e.Type, e.Object.ResourceVersion)
	}
}

func (printer) Report([]error) {}

// A stalled consumer costs one small queue per key: three modifications of the same
// ConfigMap wait as one event with the newest state, and a key created and deleted before
// the consumer saw it disappears.
func ExampleBacklog() {
	b := queue.NewBacklog(queue.BacklogOptions[*corev1.ConfigMap]{Compression: queue.Compress})
	for _, rv := range []string{"1", "2", "3"} {
		b.Push(event.Event[*corev1.ConfigMap]{Type: event.Modified, Key: "ns/a", Object: cm("a", rv)})
	}
	b.Push(event.Event[*corev1.ConfigMap]{Type: event.Added, Key: "ns/b", Object: cm("b", "4")})
	b.Push(event.Event[*corev1.ConfigMap]{Type: event.Deleted, Key: "ns/b", Object: cm("b", "5")})
	for b.Consume(printer{}, 1) > 0 {
	}
	// Output:
	// ns/a MODIFIED 3
}
