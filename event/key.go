package event

import (
	"errors"
	"fmt"
)

// ErrNilObject is returned, wrapped, when a nil object reaches a key function.
var ErrNilObject = errors.New("nil object")

// ErrNoName is returned, wrapped, when an object has no name and so cannot have a key.
var ErrNoName = errors.New("object has no name")

// KeyFunc returns the cache key of an object. It returns an error, never panics, for an
// object that cannot have a key.
type KeyFunc[T Object] func(obj T) (string, error)

// ObjectKey is the default KeyFunc: "namespace/name" for namespaced objects and "name" for
// cluster-scoped ones, the same keys client-go's MetaNamespaceKeyFunc produces. It
// returns an error wrapping ErrNilObject or ErrNoName for objects that cannot be keyed.
func ObjectKey[T Object](obj T) (string, error) {
	var zero T
	if obj == zero {
		return "", fmt.Errorf("cannot compute key: %w", ErrNilObject)
	}
	name := obj.GetName()
	if name == "" {
		return "", fmt.Errorf("cannot compute key for %T in namespace %q: %w", obj, obj.GetNamespace(), ErrNoName)
	}
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + name, nil
	}
	return name, nil
}

// SplitKey splits a key made by ObjectKey into its namespace (empty for cluster-scoped
// objects) and name.
func SplitKey(key string) (namespace, name string) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}
