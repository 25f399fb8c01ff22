package manager_test

import (
	"context"

	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// BenchmarkLoopEvent measures an event's way from a cache to its reconcile and the
// reconcile's read of the cache: b.N changes over 400 ConfigMaps in 4 namespaces, timed
// until the Loop has reconciled the last state of every key. Over a controller (typed.Loop
// alone), and over a Manager's cache of all namespaces and of the 4 namespaces.
func BenchmarkLoopEvent(b *testing.B) {
	namespaces := []string{"a", "b", "c", "d"}
	var objs []*corev1.ConfigMap
	for _, ns := range namespaces {
		for i := range 100 {
			objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-" + strconv.Itoa(i)}, Data: map[string]string{"v": "0"}})
		}
	}
	for _, scope := range []string{"controller", "manager, all namespaces", "manager, 4 namespaces"} {
		b.Run(scope, func(b *testing.B) {
			f := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList](objs...)
			var mu sync.Mutex
			seen := map[string]string{}
			want := map[string]string{}
			caught := make(chan struct{}, 1)
			r := typed.ReconcilerFunc[*corev1.ConfigMap](func(_ context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				if req.Object != nil {
					seen[req.Key] = req.Object.Data["v"]
				}
				if len(want) > 0 && caughtUp(seen, want) {
					select {
					case caught <- struct{}{}:
					default:
					}
				}
				return typed.Result{}, nil
			})
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			opts := typed.Options{Workers: 2}
			switch scope {
			case "controller":
				c := testctl.New(b, f, controller.Options[*corev1.ConfigMap]{})
				loop, err := typed.NewLoop(c, r, opts)
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() { _ = c.Run(ctx) })
				wg.Go(func() { _ = loop.Run(ctx) })
			default:
				m := manager.New(manager.Options{})
				var co []manager.CacheOptions[*corev1.ConfigMap]
				if scope == "manager, 4 namespaces" {
					co = append(co, manager.CacheOptions[*corev1.ConfigMap]{Namespaces: namespaces})
				}
				c, err := manager.Acquire(m, manager.Namespaced[*corev1.ConfigMap](func(ns string) controller.ListerWatcher[*corev1.ConfigMap, *corev1.ConfigMapList] {
					return inNamespace[*corev1.ConfigMap, *corev1.ConfigMapList]{f, ns}.or(f)
				}), co...)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := manager.NewLoop(c, r, opts); err != nil {
					b.Fatal(err)
				}
				wg.Go(func() { _ = m.Run(ctx) })
			}
			b.ResetTimer()
			last := map[string]string{}
			for i := range b.N {
				o := objs[i%len(objs)].DeepCopy()
				o.Data = map[string]string{"v": fmt.Sprint(i + 1)}
				if _, err := f.Update(o); err != nil {
					b.Fatal(err)
				}
				last[o.Namespace+"/"+o.Name] = o.Data["v"]
			}
			mu.Lock()
			want = last
			done := caughtUp(seen, want)
			mu.Unlock()
			if !done {
				<-caught
			}
			b.StopTimer()
		})
	}
}

// caughtUp reports whether seen holds want's value for every key of want.
func caughtUp(seen, want map[string]string) bool {
	for k, v := range want {
		if seen[k] != v {
			return false
		}
	}
	return true
}

// or is n, or all of f for the namespace "" (all namespaces).
func (n inNamespace[T, L]) or(f *fake.ListerWatcher[T, L]) controller.ListerWatcher[T, L] {
	if n.ns == "" {
		return f
	}
	return n
}
