package manager_test

import (
	"context"
	"fmt"

	"github.com/typedinformer/typedinformer/typed/predicate"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// A controller declared in one place: ConfigMaps reconciled when their labels change
// (predicate.LabelsChanged needs no type arguments) and when a Secret they control changes.
// Go infers every type argument from the Sources; one error check ends the declaration.
func ExampleFor() {
	web := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web"}}
	tls := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-tls",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(web, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}},
		Data: map[string][]byte{"cert": []byte("v1")}}
	cs := kubefake.NewClientset(web, tls)
	m := manager.New(manager.Options{})

	b := manager.For(m, manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps), manager.CacheOptions[*corev1.ConfigMap]{Namespaces: []string{"shop"}}).
		WithPredicates(predicate.LabelsChanged)
	secrets := manager.Owns(b, manager.Namespaced[*corev1.Secret](cs.CoreV1().Secrets))
	seen := make(chan string, 10)
	_, err := b.Complete(typed.ReconcilerFunc[*corev1.ConfigMap](func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
		s, _ := secrets.GetByName(req.Namespace, req.Name+"-tls") // the owned cache, typed
		seen <- fmt.Sprintf("reconciled %s: its certificate is %s", req.Key, s.Data["cert"])
		return typed.Result{}, nil
	}))
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	fmt.Println(<-seen)
	// Someone edits the owned Secret: its controller is reconciled.
	tls.Data["cert"] = []byte("v2")
	if _, err := cs.CoreV1().Secrets("shop").Update(ctx, tls, metav1.UpdateOptions{}); err != nil {
		fmt.Println(err)
	}
	line := <-seen
	for line != "reconciled shop/web: its certificate is v2" { // an earlier reconcile's may come first
		line = <-seen
	}
	fmt.Println(line)
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// reconciled shop/web: its certificate is v1
	// reconciled shop/web: its certificate is v2
	// stopped: <nil>
}
