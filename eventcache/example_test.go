package eventcache_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
)

// printer prints each delivered event and stops the drain loop after one batch.
type printer struct{ cancel *context.CancelFunc }

func (p printer) Deliver(batch []event.Event[*corev1.ConfigMap]) {
	for _, e := range batch {
		fmt.Println(e.Type, e.Key, "final state unknown:", e.FinalStateUnknown)
	}
	(*p.cancel)()
}

// A relist that no longer contains a known object yields its deletion, carrying the last
// known state and marked final-state-unknown.
func ExampleEventQueueCollection_Replace() {
	w := eventcache.NewWriter[*corev1.ConfigMap](nil)
	c := eventcache.NewEventQueueCollection(w.Store(), eventcache.Options[*corev1.ConfigMap]{})
	var cancel context.CancelFunc
	consumer := eventcache.NewResourceTrackingConsumer[*corev1.ConfigMap](w, printer{&cancel}, nil)
	drainOne := func() {
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		_ = c.Drain(ctx, consumer)
	}

	a := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	_ = c.Replace([]*corev1.ConfigMap{a}, "1", eventcache.CompleteList)
	drainOne()
	_ = c.Replace(nil, "2", eventcache.CompleteList)
	drainOne()
	fmt.Println("synced:", c.HasSynced(), "known:", w.Store().Len())
	// Output:
	// ADDED ns/a final state unknown: false
	// DELETED ns/a final state unknown: true
	// synced: true known: 0
}
