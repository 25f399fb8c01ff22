package typed

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/reflect"
)

// Related makes every event of secondary's objects reconcile the primary keys keysOf maps
// them to: Pods to their ReplicaSet, Secrets to the ConfigMap they mirror. For a
// modification both the old and the new state are mapped, so a key that stops being
// related is reconciled too. The keys must be those of the Loop's controller: with
// controller.WithKeyFunc, map to keys of that form.
//
// Called before the Loop runs, Related's handler is registered on secondary each time
// the Loop runs, and the Loop starts reconciling only once secondary has synced, so that
// reconcilers can read its store. Called while the Loop runs, it takes effect at once
// (the running Loop does not wait for secondary to sync) and for every later Run.
func Related[S event.Object, SL reflect.List, T event.Object, L reflect.List](
	l *Loop[T, L], secondary *controller.Controller[S, SL], keysOf func(S) []string,
) {
	add := func(enqueue func(string)) (*controller.Registration, error) {
		return secondary.AddHandler(l.opts.Name+"/related", controller.HandlerFunc[S](func(_ context.Context, e event.Event[S]) {
			for _, key := range keysOf(e.Object) {
				enqueue(key)
			}
			if e.Type == event.Modified && e.HasPrior() {
				for _, key := range keysOf(e.Prior) {
					enqueue(key)
				}
			}
		}))
	}
	l.mu.Lock()
	l.related = append(l.related, add)
	run := l.run
	l.mu.Unlock()
	if run == nil {
		return
	}
	reg, err := add(run.enqueue)
	if err != nil {
		l.report(context.Background(), klog.Background().WithValues("loop", l.opts.Name), "", fmt.Errorf("relating %T: %w", *new(S), err), false)
		return
	}
	l.mu.Lock()
	running := l.run == run
	if running {
		run.regs = append(run.regs, reg)
	}
	l.mu.Unlock()
	if !running {
		reg.Remove() // that Run has returned meanwhile
	}
}

// OwnerKeys returns a mapping for Related that maps an object to the keys of its owners
// of the given group and kind, from its owner references (an empty group means the core
// API group). scope is the owner kind's, as a RESTMapper's mapping.Scope gives it:
// meta.RESTScopeNamespace for namespaced owners (a ReplicaSet owning Pods), which are in
// the object's namespace, or meta.RESTScopeRoot for cluster-scoped ones (a Node owning
// mirror Pods), whose key is their name. The keys are in the default form
// (event.ObjectKey's).
func OwnerKeys[S event.Object](owner schema.GroupKind, scope meta.RESTScope) func(S) []string {
	clusterScoped := scope != nil && scope.Name() == meta.RESTScopeNameRoot
	return func(obj S) []string {
		var keys []string
		for _, ref := range obj.GetOwnerReferences() {
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err != nil || ref.Kind != owner.Kind || gv.Group != owner.Group {
				continue
			}
			if ns := obj.GetNamespace(); ns != "" && !clusterScoped {
				keys = append(keys, ns+"/"+ref.Name)
			} else {
				keys = append(keys, ref.Name)
			}
		}
		return keys
	}
}
