package manager

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/watchlist"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
)

// Source says where the objects of a cache come from: the ListerWatcher of each namespace.
// Declare one per resource and acquire caches of it with Acquire; a Source holds no
// connection and starts nothing.
//
// Two caches share one watch when they have the same object type T, list type L,
// Resource, Subset, namespace and selectors (see CacheOptions), whichever Source values they were
// acquired with: the first Acquire's Source makes the ListerWatcher.
type Source[T event.Object, L reflect.List] struct {
	// Resource names the resource when the Go type T does not: *unstructured.Unstructured
	// and *metav1.PartialObjectMetadata stand for any resource, so for them it is required
	// (Dynamic sets it). It is part of the sharing key; "" for ordinary API types.
	Resource string
	// GroupVersionResource names the resource on the server, for a cache to watch its
	// CustomResourceDefinition while the server does not serve it (see
	// Options.CustomResourceDefinitions). Dynamic sets it; set it on the Source of a custom
	// resource's generated client. It is not part of the sharing key.
	GroupVersionResource schema.GroupVersionResource
	// Subset, when set, names the part of the resource's objects that ListerWatcher gives,
	// for a ListerWatcher that selects some of them by itself (a shard's, see
	// shard.Filter). It is part of the sharing key: caches of one subset share a watch,
	// caches of two never do.
	Subset string
	// ClusterScoped is true for resources without namespaces (Nodes, CRDs): their caches
	// take no namespaces.
	ClusterScoped bool
	// ListerWatcher returns the ListerWatcher of one namespace, "" meaning all namespaces
	// (and, for cluster-scoped resources, the only one).
	ListerWatcher func(namespace string) controller.ListerWatcher[T, L]
}

// Namespaced returns the Source of a namespaced resource from the function that gives its
// client in a namespace. With a generated clientset it is the method value itself, and Go
// infers the list type from it:
//
//	pods := manager.Namespaced[*corev1.Pod](clientset.CoreV1().Pods)
func Namespaced[T event.Object, L reflect.List, C controller.ListerWatcher[T, L]](client func(namespace string) C) Source[T, L] {
	if client == nil {
		return Source[T, L]{}
	}
	return Source[T, L]{ListerWatcher: func(ns string) controller.ListerWatcher[T, L] { return client(ns) }}
}

// ClusterScoped returns the Source of a cluster-scoped resource from its client; Go infers
// the list type from it:
//
//	nodes := manager.ClusterScoped[*corev1.Node](clientset.CoreV1().Nodes())
func ClusterScoped[T event.Object, L reflect.List](client controller.ListerWatcher[T, L]) Source[T, L] {
	return Source[T, L]{
		ClusterScoped: true,
		ListerWatcher: func(string) controller.ListerWatcher[T, L] { return client },
	}
}

// Dynamic returns the Source of any resource through the dynamic client, as
// *unstructured.Unstructured, with the resource as its Resource (resource.version.group,
// "widgets.v1.example.com") so that caches of different resources are never shared.
func Dynamic(client dynamic.Interface, gvr schema.GroupVersionResource, clusterScoped bool) Source[*unstructured.Unstructured, *unstructured.UnstructuredList] {
	type src = Source[*unstructured.Unstructured, *unstructured.UnstructuredList]
	// resource.version.group, as kubectl writes a fully qualified resource.
	name := strings.TrimSuffix(gvr.Resource+"."+gvr.Version+"."+gvr.Group, ".")
	s := src{Resource: name, GroupVersionResource: gvr, ClusterScoped: clusterScoped}
	if guard.IsNil(client) {
		return s // Acquire reports the missing ListerWatcher
	}
	// The resource clients of a dynamic.Interface that says it cannot serve watch-list
	// say so too.
	unsupported := watchlist.DoesClientNotSupportWatchListSemantics(client)
	s.ListerWatcher = func(ns string) controller.ListerWatcher[*unstructured.Unstructured, *unstructured.UnstructuredList] {
		var lw controller.ListerWatcher[*unstructured.Unstructured, *unstructured.UnstructuredList] = client.Resource(gvr)
		if !clusterScoped {
			lw = client.Resource(gvr).Namespace(ns)
		}
		if unsupported {
			return noWatchList[*unstructured.Unstructured, *unstructured.UnstructuredList]{lw}
		}
		return lw
	}
	return s
}

// noWatchList is the ListerWatcher of a client that says it cannot serve watch-list.
type noWatchList[T event.Object, L reflect.List] struct {
	controller.ListerWatcher[T, L]
}

// IsWatchListSemanticsUnSupported says that watch-list cannot be used.
func (noWatchList[T, L]) IsWatchListSemanticsUnSupported() bool { return true }

// needsResource reports whether T stands for any resource, so that only
// Source.Resource tells two caches of it apart.
func needsResource[T event.Object]() bool {
	var zero T
	switch any(zero).(type) {
	case *unstructured.Unstructured, *metav1.PartialObjectMetadata:
		return true
	}
	return false
}
