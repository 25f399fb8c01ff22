package eventcache

import "github.com/typedinformer/typedinformer/event"

// Reader is the read API of a cache of objects of type T, the same whoever holds it: a
// controller's Store, and a Manager's cache handle (manager.Cache, which reads one
// namespace's Store or several namespaces' as one). Code that reads a cache, a
// reconciler's struct field or a test's fake, depends on Reader, or on the few of its
// methods it calls, not on which of them it is given.
//
// The objects returned are the cache's own: they must not be modified.
type Reader[T event.Object] interface {
	// Get returns the object of key.
	Get(key string) (T, bool)
	// GetByName returns the object of namespace ("" for cluster-scoped objects) and
	// name, whatever the key function.
	GetByName(namespace, name string) (T, bool)
	// List returns every object, in no particular order.
	List() []T
	// Keys returns every key, sorted.
	Keys() []string
	// Len returns the number of objects.
	Len() int
	// Range calls fn for every key and object until fn returns false; fn must not
	// write to the cache.
	Range(fn func(key string, obj T) bool)
	// InNamespace returns the objects of one namespace.
	InNamespace(namespace string) []T
	// ByIndex returns the objects the named index puts under value, in every
	// namespace; an unknown index is an error wrapping ErrNoIndex.
	ByIndex(index, value string) ([]T, error)
	// ByIndexIn returns the objects of one namespace that the named index puts under
	// value, so that index values need not carry the namespace; an unknown index is an
	// error wrapping ErrNoIndex.
	ByIndexIn(namespace, index, value string) ([]T, error)
	// IndexValues returns the values present in the named index, sorted; an unknown
	// index is an error wrapping ErrNoIndex.
	IndexValues(index string) ([]string, error)
}
