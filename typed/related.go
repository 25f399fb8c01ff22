package typed

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/typedinformer/typedinformer/typed/predicate"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
)

// Related makes every event of secondary's objects reconcile the primary keys keysOf maps
// them to: Pods to their ReplicaSet, Secrets to the ConfigMap they mirror. For a
// modification both the old and the new state are mapped, so a key that stops being
// related is reconciled too. The keys must be those of the Loop's Source: with
// controller.Options.KeyFunc, map to keys of that form.
//
// An event of secondary is mapped only when it passes every one of preds (see Predicate).
// The keys of a live change are reconciled before those of secondary's initial list,
// relists and resyncs, as the Loop's own (see Loop).
//
// Called before the Loop runs, Related's handler is registered on secondary each time
// the Loop runs, and the Loop starts reconciling only once secondary has synced, so that
// reconcilers can read its store. Called while the Loop runs, it takes effect at once
// (the running Loop does not wait for secondary to sync) and for every later Run.
//
// It returns an error wrapping controller.ErrNilArgument for a nil l, secondary, mapping or
// predicate. Run returns the same error for the last three, so that an unchecked mistake
// still stops the Loop rather than reconciling without the relation.
func Related[S event.Object, T event.Object](
	l *Loop[T], secondary Source[S], keysOf func(S) []string, preds ...predicate.Predicate[S],
) error {
	preds = slices.Clone(preds)
	var zero S
	if l == nil {
		return fmt.Errorf("%w: Related's Loop, for %T", controller.ErrNilArgument, zero)
	}
	l.watch(reflect.TypeFor[S](), secondary)
	validate := func() error {
		switch {
		case guard.IsNil(secondary):
			return fmt.Errorf("%w: Related's source of %T", controller.ErrNilArgument, zero)
		case keysOf == nil:
			return fmt.Errorf("%w: Related's mapping of %T", controller.ErrNilArgument, zero)
		}
		return predicate.Check(preds, fmt.Sprintf("Related's %T", zero))
	}
	logValues := []any{"loop", l.opts.Name, "related", fmt.Sprintf("%T", zero)}
	// A mapping or predicate that panics, or a mapping that returns an empty key, is
	// reported as the Loop's error: the secondary controller knows nothing of the Loop.
	report := func(ctx context.Context, key string, err error) {
		l.report(ctx, klog.FromContext(ctx).WithValues(logValues...), key, err, false)
	}
	// mapKeys enqueues the keys obj maps to.
	mapKeys := func(ctx context.Context, obj S, enqueue func(string)) {
		defer func() {
			if v := recover(); v != nil {
				report(ctx, "", fmt.Errorf("related mapping panicked on %s/%s: %v", obj.GetNamespace(), obj.GetName(), v))
			}
		}()
		for _, key := range keysOf(obj) {
			if _, name := event.SplitKey(key); name == "" {
				report(ctx, key, fmt.Errorf("related mapping gave %q, which names no object, for %s/%s", key, obj.GetNamespace(), obj.GetName()))
				continue
			}
			enqueue(key)
		}
	}
	add := func(enqueue func(key string, p priority)) (*controller.Registration, error) {
		if err := validate(); err != nil {
			return nil, err
		}
		return registered(secondary.AddHandler(l.opts.Name+"/related", controller.HandlerFunc[S](func(ctx context.Context, e event.Event[S]) {
			if !predicate.Passes(preds, e, func(err error) { report(ctx, "", err) }) {
				return
			}
			p := priorityOf(e.Sync)
			enqueueAt := func(key string) { enqueue(key, p) }
			mapKeys(ctx, e.Object, enqueueAt)
			if e.Type == event.Modified && e.HasPrior() {
				mapKeys(ctx, e.Prior, enqueueAt)
			}
		})))
	}
	l.mu.Lock()
	l.related = append(l.related, add)
	run := l.run
	l.mu.Unlock()
	if run == nil {
		return validate()
	}
	reg, err := add(run.enqueue)
	if err != nil {
		l.report(context.Background(), klog.Background().WithValues(logValues...), "", fmt.Errorf("relating %T: %w", zero, err), false)
		return err
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
	return nil
}

// OwnerKeys returns a mapping for Related that maps an object to the keys of its owners
// of the given group and kind, from its owner references (an empty group means the core
// API group). scope is the owner kind's, as a RESTMapper's mapping.Scope gives it:
// meta.RESTScopeNamespace for namespaced owners (a ReplicaSet owning Pods), which are in
// the object's namespace, or meta.RESTScopeRoot for cluster-scoped ones (a Node owning
// mirror Pods), whose key is their name; a nil scope counts as namespaced. The keys are in
// the default form (event.ObjectKey's).
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
