package perturb_test

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/perturb"
	"github.com/typedinformer/typedinformer/typed/predicate"
)

// A controller that gives each ConfigMap a Secret and then notes the Secret's name on
// the ConfigMap: two writes, the first not idempotent (the Secret's name is generated).
// Its unit test would pass; crashed right after its first write, it makes a second
// Secret. In a test, perturb.Test(t, ...) reports each failure with its seed instead.
func ExampleCheck() {
	controller := func(ctx context.Context, env perturb.Env) error {
		m := manager.New(manager.Options{})
		b := manager.For(m, manager.Namespaced[*corev1.ConfigMap](env.Clientset.CoreV1().ConfigMaps)).
			WithPredicates(predicate.GenerationChanged).WithOptions(typed.Options{Clock: env.Clock})
		_, err := b.Complete(typed.ReconcilerFunc[*corev1.ConfigMap](func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			cm := req.Object
			if req.Deleted || cm.Annotations["secret"] != "" {
				return typed.Result{}, nil
			}
			s, err := env.Clientset.CoreV1().Secrets(cm.Namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: cm.Name + "-"}}, metav1.CreateOptions{})
			if err != nil {
				return typed.Result{}, err
			}
			cm = cm.DeepCopy()
			cm.Annotations = map[string]string{"secret": s.Name}
			_, err = env.Clientset.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
			return typed.Result{}, err
		}))
		if err != nil {
			return err
		}
		return m.Run(ctx)
	}
	scenario := []perturb.Step{{Name: "a ConfigMap is made", Do: func(ctx context.Context, env perturb.Env) error {
		_, err := env.Clientset.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{})
		return err
	}}}

	rep, err := perturb.Check(context.Background(), controller, scenario, perturb.Options{Classes: []perturb.Class{perturb.Crash}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("reference run:", strings.Join(rep.Writes, ", "))
	for _, f := range rep.Failures {
		fmt.Println(f.Perturbation)
		fmt.Println("  a second Secret:", strings.Contains(f.Diff, `"shop/web-*#1"`))
	}
	// Output:
	// reference run: create secrets shop/web-*, update configmaps shop/web
	// crash after write 1 (create secrets shop/web-*) [seed 0]
	//   a second Secret: true
}
