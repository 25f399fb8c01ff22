package client

import (
	"context"
	"fmt"

	"github.com/typedinformer/typedinformer/controller"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/consistency"
)

// FromDynamicNamespaced returns FromDynamic's adapter over client.Namespace(namespace)
// for each namespace: the per-namespace client that NewFinalizer, NewStatusWriter and
// NewOwned take, for a custom resource's Go struct. For a cluster-scoped resource the
// namespace is "".
func FromDynamicNamespaced[T event.Object](client dynamic.NamespaceableResourceInterface) func(namespace string) *Dynamic[T] {
	return func(namespace string) *Dynamic[T] {
		if guard.IsNil(client) {
			return nil
		}
		return FromDynamic[T](client.Namespace(namespace))
	}
}

// Get reads the object name and converts it to T.
func (d *Dynamic[T]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	if d == nil {
		return d.nilClient()
	}
	return d.converted("Get")(d.client.Get(ctx, name, opts))
}

// Create creates obj, which must carry its apiVersion and kind (TypeMeta): the dynamic
// client sends them, and a Go struct does not know them by itself. Objects read through
// FromDynamic carry them.
func (d *Dynamic[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	u, err := d.unstructured(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	return d.written(ctx, "Create")(d.client.Create(ctx, u, opts))
}

// Update replaces obj, which must carry its apiVersion and kind (see Create) and, to be
// refused rather than overwrite a newer state, the resource version it was read at.
func (d *Dynamic[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	u, err := d.unstructured(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	return d.written(ctx, "Update")(d.client.Update(ctx, u, opts))
}

// UpdateStatus writes obj's status through the status subresource, with the same
// requirements as Update.
func (d *Dynamic[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	u, err := d.unstructured(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	return d.written(ctx, "UpdateStatus")(d.client.UpdateStatus(ctx, u, opts))
}

// Patch patches the object name, or the given subresource of it, and converts the result.
func (d *Dynamic[T]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	if d == nil {
		return d.nilClient()
	}
	return d.written(ctx, "Patch")(d.client.Patch(ctx, name, pt, data, opts, subresources...))
}

// Delete deletes the object name. Unlike the other writes it records nothing for the
// reconcile, having no object to record: write.Owned.Delete does, and a reconciler
// deleting through Delete itself records the object it deleted with consistency.Deleted.
func (d *Dynamic[T]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if d == nil {
		_, err := d.nilClient()
		return err
	}
	return d.client.Delete(ctx, name, opts)
}

func (d *Dynamic[T]) nilClient() (T, error) {
	var zero T
	return zero, fmt.Errorf("%w: the dynamic client of a Dynamic[%T]", controller.ErrNilArgument, zero)
}

// written is converted for a write: the object the server returned is recorded for the
// reconcile ctx belongs to (consistency.Wrote), so that its key is not reconciled again
// before the Loop's caches have applied the write.
func (d *Dynamic[T]) written(ctx context.Context, method string) func(*unstructured.Unstructured, error) (T, error) {
	convert := d.converted(method)
	return func(u *unstructured.Unstructured, err error) (T, error) {
		obj, err := convert(u, err)
		if err == nil {
			consistency.Wrote(ctx, obj)
		}
		return obj, err
	}
}

// converted returns a function that converts what the dynamic client's method returned.
func (d *Dynamic[T]) converted(method string) func(*unstructured.Unstructured, error) (T, error) {
	return func(u *unstructured.Unstructured, err error) (T, error) {
		var zero T
		switch {
		case err != nil:
			return zero, err
		case u == nil:
			return zero, fmt.Errorf("%w: the dynamic client's %s", ErrNilObject, method)
		}
		return convert[T](u)
	}
}

func (d *Dynamic[T]) unstructured(obj T) (*unstructured.Unstructured, error) {
	if d == nil {
		_, err := d.nilClient()
		return nil, err
	}
	if guard.IsNil(obj) {
		return nil, fmt.Errorf("%w: the object to write", controller.ErrNilArgument)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T %s/%s to unstructured: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	u := &unstructured.Unstructured{Object: m}
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return nil, fmt.Errorf("%T %s/%s has no apiVersion and kind, which the dynamic client must send: set its TypeMeta", obj, obj.GetNamespace(), obj.GetName())
	}
	return u, nil
}
