package eventcheck_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
)

func Example() {
	cm := func(rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: rv}}
	}
	chk := eventcheck.New[*corev1.ConfigMap]("example")
	ctx := context.Background()
	chk.Handle(ctx, event.Event[*corev1.ConfigMap]{Type: event.Added, Object: cm("1")})
	chk.Handle(ctx, event.Event[*corev1.ConfigMap]{Type: event.Modified, Object: cm("2"), Prior: cm("1")})
	fmt.Println(chk.Versions(), chk.Problems())
	// A modification whose prior is not what the handler last saw is a problem.
	chk.Handle(ctx, event.Event[*corev1.ConfigMap]{Type: event.Modified, Object: cm("3"), Prior: cm("1")})
	fmt.Println(chk.Problems())
	// Output:
	// map[ns/a:2] []
	// [ns/a: MODIFIED ns/a@3 has prior 1 (uid ), last seen 2 (uid )]
}
