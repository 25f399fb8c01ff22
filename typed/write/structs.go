package write

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/client"
)

// StructClient applies a built-in kind's own Go struct (T, *appsv1.Deployment) through
// the kind's generated client, which takes its apply configuration (AC): a convenience
// for code that builds the struct already. Make it with Structs.
type StructClient[T event.Object, AC any] struct {
	client OwnedApplyClient[T, AC]
}

// Structs adapts clients, the generated clients of a built-in kind (such as
// clientset.AppsV1().Deployments), so that NewApplier and NewOwnedApplier take the kind's
// Go struct as intents rather than its apply configuration:
//
//	deployments := write.NewApplier(write.Structs(clientset.AppsV1().Deployments))
//	_, err := deployments.Apply(ctx, &appsv1.Deployment{ObjectMeta: ..., Spec: ...})
//
// A struct becomes an intent by client.Intent's rules, as a custom resource's does: only
// what was set is sent, except scalar fields without omitempty, which are required by
// convention and sent even when zero. Its apiVersion and kind, which typed clients'
// objects lack, come from client-go's scheme. Apply configurations remain the exact
// way: with them nothing is sent that the caller did not set.
func Structs[T event.Object, AC any, C OwnedApplyClient[T, AC]](clients func(namespace string) C) func(namespace string) *StructClient[T, AC] {
	if clients == nil {
		return nil
	}
	return func(namespace string) *StructClient[T, AC] {
		return &StructClient[T, AC]{client: clients(namespace)}
	}
}

// Get reads the object name.
func (c *StructClient[T, AC]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	if err := c.check(); err != nil {
		var zero T
		return zero, err
	}
	return c.client.Get(ctx, name, opts)
}

// Apply applies obj's intent (see Structs) and returns the object the server returned.
func (c *StructClient[T, AC]) Apply(ctx context.Context, obj T, opts metav1.ApplyOptions) (T, error) {
	var zero T
	if err := c.check(); err != nil {
		return zero, err
	}
	u, err := client.Intent(obj)
	if err != nil {
		return zero, err
	}
	if u.GetKind() == "" {
		kinds, _, err := scheme.Scheme.ObjectKinds(obj)
		if err != nil || len(kinds) == 0 {
			return zero, fmt.Errorf("the apiVersion and kind of %T: %v", obj, err)
		}
		u.SetAPIVersion(kinds[0].GroupVersion().String())
		u.SetKind(kinds[0].Kind)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return zero, fmt.Errorf("encoding the intent of %T: %w", obj, err)
	}
	var ac AC
	if err := json.Unmarshal(data, &ac); err != nil {
		return zero, fmt.Errorf("converting %T to %T: %w", obj, ac, err)
	}
	return c.client.Apply(ctx, ac, opts)
}

func (c *StructClient[T, AC]) check() error {
	if c == nil || guard.IsNil(c.client) {
		var zero T
		return fmt.Errorf("%w: the client of %T", controller.ErrNilArgument, zero)
	}
	return nil
}
