package queue_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/queue"
)

// A stalled consumer costs one small queue per key: three modifications of the same
// ConfigMap wait as one event with the newest state, and a key created and deleted before
// the consumer saw it disappears.
func ExampleFIFO() {
	f := queue.NewFIFO(queue.Compress, queue.KnownFromFirstEvent[*corev1.ConfigMap])
	for _, rv := range []string{"1", "2", "3"} {
		f.Push("ns/a", event.Event[*corev1.ConfigMap]{Type: event.Modified, Object: cm("a", rv)}, false)
	}
	f.Push("ns/b", event.Event[*corev1.ConfigMap]{Type: event.Added, Object: cm("b", "4")}, false)
	f.Push("ns/b", event.Event[*corev1.ConfigMap]{Type: event.Deleted, Object: cm("b", "5")}, false)
	for {
		key, events, _, ok := f.Pop(nil)
		if !ok {
			break
		}
		for _, e := range events {
			fmt.Println(key, e.Type, e.Object.ResourceVersion)
		}
	}
	// Output:
	// ns/a MODIFIED 3
}
