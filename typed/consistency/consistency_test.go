package consistency_test

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedinformer/typedinformer/typed/consistency"
)

// kept is a Recorder that keeps the names it is told of.
type kept struct {
	mu      sync.Mutex
	wrote   []string
	deleted []string
}

func (k *kept) Wrote(obj runtime.Object) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.wrote = append(k.wrote, obj.(metav1.Object).GetName())
}

func (k *kept) Deleted(obj runtime.Object) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.deleted = append(k.deleted, obj.(metav1.Object).GetName())
}

// DESIGN 19: recording is a no-op outside a reconcile, and nil input at every boundary
// (a nil context, a nil or typed-nil object, a typed-nil Recorder) records nothing and
// never panics.
func TestNilInputRecordsNothingAndNeverPanics(t *testing.T) {
	var typedNil *corev1.ConfigMap
	var nilRecorder *kept
	k := &kept{}
	for name, ctx := range map[string]context.Context{
		"nil context":         nil, //nolint:staticcheck // the attack
		"outside a reconcile": context.Background(),
		"typed-nil Recorder":  consistency.WithRecorder(context.Background(), nilRecorder),
		"a Recorder":          consistency.WithRecorder(context.Background(), k),
	} {
		t.Run(name, func(t *testing.T) {
			for _, obj := range []runtime.Object{nil, typedNil} {
				consistency.Wrote(ctx, obj)
				consistency.Deleted(ctx, obj)
			}
		})
	}
	if len(k.wrote)+len(k.deleted) != 0 {
		t.Fatalf("nil objects were recorded: %v, %v", k.wrote, k.deleted)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	consistency.Wrote(consistency.WithRecorder(context.Background(), k), cm)
	consistency.Deleted(consistency.WithRecorder(context.Background(), k), cm)
	if len(k.wrote) != 1 || len(k.deleted) != 1 {
		t.Fatalf("a real object recorded %v written, %v deleted; want one of each", k.wrote, k.deleted)
	}
}

// Many goroutines of one reconcile may record at once (a reconciler that writes its
// children in parallel): every write reaches the Recorder.
func TestConcurrentWritesOfOneReconcileAreAllRecorded(t *testing.T) {
	k := &kept{}
	ctx := consistency.WithRecorder(context.Background(), k)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			consistency.Wrote(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: string(rune('a' + i%26))}})
		})
	}
	wg.Wait()
	if len(k.wrote) != 50 {
		t.Fatalf("%d of 50 writes recorded", len(k.wrote))
	}
}
