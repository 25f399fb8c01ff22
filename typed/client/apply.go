package client

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/guard"
)

// Apply applies obj, a custom resource's Go struct filled with only the fields the caller
// wants to own, by server-side apply (opts.FieldManager is required by the server), and
// converts the object the server returns. What is sent is Intent(obj): obj's fields
// without those left unset, so that a field the caller did not set is never claimed.
// obj must carry its apiVersion and kind (see Create); its name says which object.
// The write is recorded for the reconcile ctx belongs to (consistency.Wrote).
func (d *Dynamic[T]) Apply(ctx context.Context, obj T, opts metav1.ApplyOptions) (T, error) {
	u, err := d.intent(obj, false)
	if err != nil {
		var zero T
		return zero, err
	}
	return d.written(ctx, "Apply")(d.client.Apply(ctx, u.GetName(), u, opts))
}

// ApplyStatus applies obj's status through the status subresource, as Apply does. Only
// obj's apiVersion, kind, name, namespace and status are sent: the status subresource
// ignores the rest, and sending it would only make the intent harder to read.
func (d *Dynamic[T]) ApplyStatus(ctx context.Context, obj T, opts metav1.ApplyOptions) (T, error) {
	u, err := d.intent(obj, true)
	if err != nil {
		var zero T
		return zero, err
	}
	return d.written(ctx, "ApplyStatus")(d.client.ApplyStatus(ctx, u.GetName(), u, opts))
}

func (d *Dynamic[T]) intent(obj T, statusOnly bool) (*unstructured.Unstructured, error) {
	if d == nil {
		_, err := d.nilClient()
		return nil, err
	}
	u, err := Intent(obj)
	if err != nil {
		return nil, err
	}
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return nil, fmt.Errorf("%T %s/%s has no apiVersion and kind, which an apply must send: set its TypeMeta", obj, obj.GetNamespace(), obj.GetName())
	}
	if u.GetName() == "" {
		return nil, fmt.Errorf("%w: the name of the %T to apply", controller.ErrNilArgument, obj)
	}
	if statusOnly {
		kept := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": map[string]any{"name": u.GetName()}}
		if ns := u.GetNamespace(); ns != "" {
			kept["metadata"].(map[string]any)["namespace"] = ns
		}
		if status, ok := u.Object["status"]; ok {
			kept["status"] = status
		}
		u = &unstructured.Unstructured{Object: kept}
	}
	return u, nil
}

// Intent returns the apply intent of obj, a Go struct of an API object that the caller
// filled with only what they want to own: its JSON form (runtime.DefaultUnstructuredConverter,
// so JSON tags and omitempty are honoured) with every null and every empty object ({})
// removed, recursively, also inside list items. That drops what the caller left unset:
// nil pointers, nil maps and slices, and structs with nothing set (such as
// metadata.creationTimestamp, or an omitempty status). What stays is what was set, and
// the scalar zero values of fields without omitempty: by Kubernetes convention such a
// field is required, so an intent always states it. An empty list ([]) stays unless its
// field is omitempty: a non-nil empty slice says "this list, empty", which the caller
// set. Items of a list are kept whole, even when pruned empty, so as not to shift it.
func Intent(obj any) (*unstructured.Unstructured, error) {
	if guard.IsNil(obj) {
		return nil, fmt.Errorf("%w: the object to apply", controller.ErrNilArgument)
	}
	m, err := toUnstructured(obj)
	if err != nil {
		return nil, err
	}
	pruneMap(m)
	return &unstructured.Unstructured{Object: m}, nil
}

// pruneMap removes from m, recursively, nulls and the objects left empty once pruned.
func pruneMap(m map[string]any) {
	for k, v := range m {
		if prune(v) {
			delete(m, k)
		}
	}
}

// prune prunes v and reports whether it is to be removed: a null, or an object left empty.
func prune(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		pruneMap(v)
		return len(v) == 0
	case []any:
		for i, item := range v {
			if m, ok := item.(map[string]any); ok {
				pruneMap(m) // an item left empty stays: removing it would shift the list
				v[i] = m
			} else if item != nil {
				prune(item)
			}
		}
	}
	return false
}

// toUnstructured returns obj's JSON form as a map of its own, which the caller may change.
func toUnstructured(obj any) (map[string]any, error) {
	if u, ok := obj.(interface{ UnstructuredContent() map[string]any }); ok {
		return runtime.DeepCopyJSON(u.UnstructuredContent()), nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T to unstructured: %w", obj, err)
	}
	return m, nil
}
