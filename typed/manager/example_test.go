package manager_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// A controller program: a shared cache of ConfigMaps, a loop that reconciles them, and
// the Manager that runs both. In a cluster the clientset comes from kubernetes.NewForConfig,
// and Options sets LeaderElection (a *leaderelection.Config), HealthProbeAddress (":8081")
// and, for caches of custom resources, CustomResourceDefinitions.
func Example() {
	cs := kubefake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}})
	configMaps := manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps) // declared once per resource
	scope := manager.CacheOptions[*corev1.ConfigMap]{Namespaces: []string{"default"}}

	m := manager.New(manager.Options{})
	cache, err := manager.Acquire(m, configMaps, scope)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cache.Release()
	reconciled := make(chan string)
	_, err = manager.NewLoop(cache, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			select {
			case reconciled <- req.Key:
			case <-ctx.Done():
			}
			return typed.Result{}, nil
		}), typed.Options{Name: "settings"})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Another part of the program asks for the same cache: it shares the first one's
	// list and watch.
	shared, err := manager.Acquire(m, configMaps, scope)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer shared.Release()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	fmt.Println("reconciled", <-reconciled)
	settings, _ := shared.GetByName("default", "settings")
	fmt.Println("read through the shared cache:", settings.Name)
	probe := httptest.NewRecorder()
	m.ReadyzHandler().ServeHTTP(probe, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	fmt.Print("/readyz: ", probe.Code, "\n", probe.Body.String())

	cancel() // the loop stops taking keys, in-flight reconciles finish, then the caches stop
	fmt.Println("stopped:", <-done)
	// Output:
	// reconciled default/settings
	// read through the shared cache: settings
	// /readyz: 200
	// [+]manager ok
	// [+]loop settings ok
	// readyz check passed
	// stopped: <nil>
}

// Keys from outside the cluster: a Trigger reading a channel (a webhook handler would
// send to it), and a reconciler that asks for another key through its context.
func ExampleLoop_AddTrigger() {
	cs := kubefake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}})
	m := manager.New(manager.Options{})
	cache, err := manager.Acquire(m, manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps),
		manager.CacheOptions[*corev1.ConfigMap]{Namespaces: []string{"default"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cache.Release()
	reconciled := make(chan string)
	loop, err := manager.NewLoop(cache, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if req.Key == "default/from-webhook" {
				// Reconciling this key calls for another one.
				if err := manager.Enqueue(ctx, "default/settings"); err != nil {
					return typed.Result{}, err
				}
			}
			select {
			case reconciled <- fmt.Sprintf("%s (in the cache: %v)", req.Key, !req.Deleted):
			case <-ctx.Done():
			}
			return typed.Result{}, nil
		}), typed.Options{Name: "settings"})
	if err != nil {
		fmt.Println(err)
		return
	}
	keys := make(chan string)
	if err := loop.AddTrigger("webhook", manager.Channel(keys)); err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	fmt.Println(<-reconciled) // the cache's own key, at start
	keys <- "default/from-webhook"
	fmt.Println(<-reconciled)
	fmt.Println(<-reconciled)
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// default/settings (in the cache: true)
	// default/from-webhook (in the cache: false)
	// default/settings (in the cache: true)
	// stopped: <nil>
}
