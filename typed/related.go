package typed

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/reflect"
)

// Related makes every event of secondary's objects reconcile the primary keys keysOf maps
// them to: Pods to their ReplicaSet, Secrets to the ConfigMap they mirror. For a
// modification both the old and the new state are mapped, so a key that stops being
// related is reconciled too. Call it before the Loop runs; the handler is registered on
// secondary while the Loop runs, and the Loop starts reconciling only once secondary has
// synced, so that reconcilers can read its store.
func Related[S event.Object, SL reflect.List, T event.Object, L reflect.List](
	l *Loop[T, L], secondary *controller.Controller[S, SL], keysOf func(S) []string,
) {
	l.related = append(l.related, func(enqueue func(string)) (*controller.Registration, error) {
		reg, err := secondary.AddHandler(l.opts.Name+"/related", controller.HandlerFunc[S](func(_ context.Context, e event.Event[S]) {
			for _, key := range keysOf(e.Object) {
				enqueue(key)
			}
			if e.Type == event.Modified && e.HasPrior() {
				for _, key := range keysOf(e.Prior) {
					enqueue(key)
				}
			}
		}))
		return reg, err
	})
}

// OwnerKeys returns a mapping for Related that maps an object to the keys of its owners
// of the given group and kind (from its owner references; owners are in the object's
// namespace). An empty group means the core API group.
func OwnerKeys[S event.Object](owner schema.GroupKind) func(S) []string {
	return func(obj S) []string {
		var keys []string
		for _, ref := range obj.GetOwnerReferences() {
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err != nil || ref.Kind != owner.Kind || gv.Group != owner.Group {
				continue
			}
			if ns := obj.GetNamespace(); ns != "" {
				keys = append(keys, ns+"/"+ref.Name)
			} else {
				keys = append(keys, ref.Name)
			}
		}
		return keys
	}
}
