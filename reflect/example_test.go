package reflect_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/reflect"
)

// printCache is an EventCache that prints what the reflector writes.
type printCache struct{ done chan struct{} }

func (p printCache) Add(e event.Event[*corev1.ConfigMap]) error {
	fmt.Println("add:", e.Type, e.Object.Name)
	close(p.done)
	return nil
}

func (p printCache) Replace(objs []*corev1.ConfigMap, rv string, completeness eventcache.ListCompleteness) error {
	fmt.Println("replace:", len(objs), "objects at resource version", rv, "("+completeness.String()+")")
	return nil
}

func (p printCache) Synchronize() error { return nil }

func Example() {
	src := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}},
	)
	cache := printCache{done: make(chan struct{})}
	r := reflect.New(src, cache, reflect.Options[*corev1.ConfigMap]{})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); r.Run(ctx) }()
	_ = src.WaitForWatchers(ctx, 1)
	_, _ = src.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}})
	<-cache.done
	cancel()
	<-stopped
	fmt.Println("last resource version:", r.LastSyncResourceVersion())
	// Output:
	// replace: 1 objects at resource version 1 (complete)
	// add: ADDED b
	// last resource version: 2
}

// WatchListUnsupported tells the clients whose watches would never end a watch-list's
// initial events, such as the typed clients of client-go's fake clientset, from those
// that serve it, such as controller/fake's ListerWatcher: a reflector with
// Options.WatchList lists over the former.
func ExampleWatchListUnsupported() {
	fmt.Println("client-go's fake clientset:", reflect.WatchListUnsupported(kubefake.NewClientset().CoreV1().ConfigMaps("default")))
	fmt.Println("controller/fake:", reflect.WatchListUnsupported(fake.New[*corev1.ConfigMap, *corev1.ConfigMapList]()))
	// Output:
	// client-go's fake clientset: true
	// controller/fake: false
}
