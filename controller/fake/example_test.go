package fake_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/controller/fake"
)

// A test seeds the fake, lists, then watches from the resource version of an earlier
// change: the fake replays every change after it, in order, and then streams live ones.
func Example() {
	ctx := context.Background()
	f := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList]()

	first, _ := f.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "one"}})
	_, _ = f.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "two"}})

	list, _ := f.List(ctx, metav1.ListOptions{})
	fmt.Println("list at resource version", list.ResourceVersion)
	for _, item := range list.Items {
		fmt.Printf("  %s/%s@%s\n", item.Namespace, item.Name, item.ResourceVersion)
	}

	w, _ := f.Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
	defer w.Stop()
	_, _ = f.Delete("demo", "one") // a live change, after the replay

	for range 2 {
		e := <-w.ResultChan()
		obj := e.Object.(*corev1.ConfigMap)
		fmt.Printf("%s %s/%s@%s\n", e.Type, obj.Namespace, obj.Name, obj.ResourceVersion)
	}
	// Output:
	// list at resource version 2
	//   demo/one@1
	//   demo/two@2
	// ADDED demo/two@2
	// DELETED demo/one@3
}
