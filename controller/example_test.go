package controller_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/client"
)

// A typed controller over ConfigMaps. In production the ListerWatcher is
// clientset.CoreV1().ConfigMaps(namespace); here it is the package fake.
func Example() {
	src := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}},
	)
	c, err := controller.New(src, controller.Options[*corev1.ConfigMap]{})
	if err != nil {
		fmt.Println(err)
		return
	}

	done := make(chan struct{})
	reg, _ := c.AddHandler("printer", controller.HandlerFuncs[*corev1.ConfigMap]{
		AddFunc: func(_ context.Context, cm *corev1.ConfigMap) {
			fmt.Println("added", cm.Namespace+"/"+cm.Name)
		},
		UpdateFunc: func(_ context.Context, old, cm *corev1.ConfigMap) {
			fmt.Println("updated", cm.Name, "data", old.Data, "->", cm.Data)
		},
		DeleteFunc: func(_ context.Context, cm *corev1.ConfigMap, finalStateUnknown bool) {
			fmt.Println("deleted", cm.Name, "final state unknown:", finalStateUnknown)
			close(done)
		},
	})

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = c.Run(ctx) }()
	<-reg.Synced()
	_ = src.WaitForWatchers(ctx, 1)

	cm, _ := src.Get("default", "settings")
	cm.Data = map[string]string{"mode": "fast"}
	_, _ = src.Update(cm)
	_, _ = src.Delete("default", "settings")
	<-done
	cancel()
	<-stopped
	fmt.Println("known objects:", c.Store().Len())
	// Output:
	// added default/settings
	// updated settings data map[] -> map[mode:fast]
	// deleted settings final state unknown: false
	// known objects: 0
}

// HandlerFunc takes one function for every event, with the event's full detail: the
// prior state, and whether a deletion was inferred from a relist.
func ExampleHandlerFunc() {
	src := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}},
	)
	c, err := controller.New(src, controller.Options[*corev1.ConfigMap]{})
	if err != nil {
		fmt.Println(err)
		return
	}
	seen := make(chan event.Event[*corev1.ConfigMap], 1)
	_, _ = c.AddHandler("events", controller.HandlerFunc[*corev1.ConfigMap](
		func(_ context.Context, e event.Event[*corev1.ConfigMap]) { seen <- e }))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = c.Run(ctx) }()
	e := <-seen
	fmt.Println(e.Type, e.Object.Name, "from a list:", e.Sync)
	cancel()
	<-stopped
	// Output: ADDED a from a list: true
}

// With Options, Go infers New's type arguments: the list type from the ListerWatcher, the
// object type from the Options. Their functions have the controller's object type, so
// that a key function, transform or index of another type does not compile. Every
// controller also indexes by namespace.
func Example_options() {
	src := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", Labels: map[string]string{"team": "blue"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "y", Labels: map[string]string{"team": "red"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}},
	)
	c, err := controller.New(src, controller.Options[*corev1.ConfigMap]{
		Options: reflect.Options[*corev1.ConfigMap]{Transform: client.StripManagedFields[*corev1.ConfigMap]},
		Indexers: eventcache.Indexers[*corev1.ConfigMap]{
			"team": func(cm *corev1.ConfigMap) ([]string, error) { return []string{cm.Labels["team"]}, nil },
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = c.Run(ctx) }()
	_ = c.WaitForSync(ctx)
	red, _ := c.Store().ByIndex("team", "red")
	fmt.Println(len(red), red[0].Namespace+"/"+red[0].Name, "managed fields:", len(red[0].ManagedFields))
	cancel()
	<-stopped
	// Output: 1 b/y managed fields: 0
}
