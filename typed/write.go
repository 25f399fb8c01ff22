package typed

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/nilness"
)

// The write side (Finalizer, StatusWriter, Owned) takes its API client as a function
// from a namespace to a client of that namespace, because generated clients are per
// namespace: a method value such as clientset.AppsV1().Deployments is such a function as
// it is, FromDynamicNamespaced makes one for a custom resource's Go struct, and
// ClusterScoped makes one for a cluster-scoped kind. The client types are the small
// interfaces below, which generated clients and *Dynamic[T] satisfy with no adapter, and
// from which Go infers the object type.

// Getter reads one object by name, in the namespace its client is for.
type Getter[T event.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
}

// Patcher reads and patches objects: what a Finalizer needs.
type Patcher[T event.Object] interface {
	Getter[T]
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// StatusUpdater reads objects and writes their status subresource: what a StatusWriter
// needs.
type StatusUpdater[T event.Object] interface {
	Getter[T]
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// CreateUpdater reads, creates and updates objects: what Owned needs.
type CreateUpdater[T event.Object] interface {
	Getter[T]
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// CacheReader reads a cached object by namespace and name; *eventcache.Store[T] (a
// controller's Store()) and a manager's cache handle are CacheReaders.
type CacheReader[T event.Object] interface {
	GetByName(namespace, name string) (T, bool)
}

// ClusterScoped turns the client of a cluster-scoped kind into the per-namespace
// function the writers take: NewFinalizer(ClusterScoped(clientset.CoreV1().Nodes()), ...).
// The namespace, "" for cluster-scoped objects, is ignored.
func ClusterScoped[C any](client C) func(namespace string) C {
	return func(string) C { return client }
}

// perNamespace turns clients into a function returning the interface I, reporting a nil
// function or a nil client as an error wrapping ErrNilArgument.
func perNamespace[I any, C any](clients func(namespace string) C, conv func(C) I) func(namespace string) (I, error) {
	if clients == nil {
		return nil
	}
	return func(namespace string) (I, error) {
		c := clients(namespace)
		if nilness.IsNil(c) {
			var zero I
			return zero, fmt.Errorf("%w: the client for namespace %q", ErrNilArgument, namespace)
		}
		return conv(c), nil
	}
}

// copies returns two deep copies of obj made through its JSON form, so that a mutation
// of one is compared with the other. They are made through JSON rather than
// DeepCopyObject because a custom resource's hand-written DeepCopyObject often copies
// only the top level: the mutation would then change the cached object too, and the
// comparison would see no change. JSON is also the form the server receives, and a
// conversion it does not keep exactly (a time's precision) is the same in both copies.
func copies[T event.Object](obj T) (before, after T, err error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return before, after, fmt.Errorf("copying %T: %w", obj, err)
	}
	before, after = newObject[T](), newObject[T]()
	if err := json.Unmarshal(data, before); err != nil {
		return before, after, fmt.Errorf("copying %T: %w", obj, err)
	}
	if err := json.Unmarshal(data, after); err != nil {
		return before, after, fmt.Errorf("copying %T: %w", obj, err)
	}
	return before, after, nil
}
