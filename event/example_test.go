package event_test

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/event"
)

func ExampleObjectKey() {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	k1, _ := event.ObjectKey(pod)
	k2, _ := event.ObjectKey(node)
	_, err := event.ObjectKey(&corev1.Pod{})
	fmt.Println(k1, k2, errors.Is(err, event.ErrNoName))
	// Output: default/web-0 node-a true
}

func ExampleEvent() {
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg", ResourceVersion: "1"}}
	cur := old.DeepCopy()
	cur.ResourceVersion = "2"
	e := event.Event[*corev1.ConfigMap]{Type: event.Modified, Object: cur, Prior: old}
	fmt.Println(e, "prior:", e.Prior.ResourceVersion)
	// Output: MODIFIED ns/cfg@2 prior: 1
}
