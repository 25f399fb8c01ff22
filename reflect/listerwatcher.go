package reflect

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/event"
)

// List is the constraint on a list type L: a runtime.Object with list metadata (resource
// version, continue token) whose items are of the object type, such as *corev1.PodList.
type List interface {
	runtime.Object
	metav1.ListInterface
}

// ListerWatcher lists and watches objects of type T whose list type is L. A generated
// typed client such as clientset.CoreV1().Pods(namespace), the dynamic client's
// ResourceInterface (T = *unstructured.Unstructured) and the metadata client's
// ResourceInterface (T = *metav1.PartialObjectMetadata) all satisfy it as they are.
//
// T appears only in the type, not in the methods: it ties the list type to the object type
// so that the reflector can check every item and every watched object against T.
type ListerWatcher[T event.Object, L List] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}
