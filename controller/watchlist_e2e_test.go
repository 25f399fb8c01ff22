package controller_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"time"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/controlplane"
)

// countingLists counts the List calls made through a typed client.
type countingLists struct {
	typedcorev1.ConfigMapInterface
	lists atomic.Int32
}

func (c *countingLists) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	c.lists.Add(1)
	return c.ConfigMapInterface.List(ctx, opts)
}

// TestWatchListOnARealServer streams the initial state from kube-apiserver with the
// watch-list protocol (no List call at all) and then follows changes.
func TestWatchListOnARealServer(t *testing.T) {
	cp := controlplane.StartForTest(t)
	cs := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ctx := context.Background()
	for i := range 50 {
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lw := &countingLists{ConfigMapInterface: cs.CoreV1().ConfigMaps("default")}
	c := controller.New[obj, list](lw, controller.WithWatchList(true))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	if err := c.WaitForSync(runCtx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var want, got map[string]string
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		l, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		want, got = map[string]string{}, map[string]string{}
		for _, o := range l.Items {
			want["default/"+o.Name] = o.ResourceVersion
		}
		c.Store().Range(func(k string, o obj) bool { got[k] = o.ResourceVersion; return true })
		return cmp.Equal(want, got), nil
	})
	if err != nil {
		t.Fatalf("cache differs from the server (-server +cache):\n%s", cmp.Diff(want, got))
	}
	if n := lw.lists.Load(); n != 0 {
		t.Errorf("%d List calls: the initial state should have come through the watch-list stream", n)
	}
}
