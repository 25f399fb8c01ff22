package typed_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/client"
)

// benchObjects is how many ConfigMaps BenchmarkStripManagedFieldsMemory caches.
const benchObjects = 10_000

// benchConfigMap returns a ConfigMap as kube-apiserver returns it after `kubectl apply`
// and an update by a controller: a little data, the labels and the last-applied
// annotation kubectl writes, and two managedFields entries whose FieldsV1 are about 400
// bytes of JSON each, like the server writes.
func benchConfigMap(i int) *corev1.ConfigMap {
	applied := `{"f:data":{".":{},"f:config.yaml":{},"f:feature-flags":{},"f:log-level":{}},` +
		`"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}},` +
		`"f:labels":{".":{},"f:app.kubernetes.io/component":{},"f:app.kubernetes.io/instance":{},` +
		`"f:app.kubernetes.io/managed-by":{},"f:app.kubernetes.io/name":{},"f:app.kubernetes.io/part-of":{},` +
		`"f:app.kubernetes.io/version":{}}}}`
	updated := `{"f:data":{"f:checksum":{},"f:generated-at":{},"f:replicas":{}},` +
		`"f:metadata":{"f:annotations":{"f:config.example.com/checksum":{},"f:config.example.com/generation":{},` +
		`"f:config.example.com/observed-by":{}},"f:labels":{"f:config.example.com/hash":{}},` +
		`"f:ownerReferences":{".":{},"k:{\"uid\":\"6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f\"}":{}}}}`
	at := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second))
	name := fmt.Sprintf("config-%05d", i)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "bench",
			Name:      name,
			Labels: map[string]string{
				"app.kubernetes.io/name": "shop", "app.kubernetes.io/instance": name,
				"app.kubernetes.io/component": "config", "app.kubernetes.io/part-of": "shop",
				"app.kubernetes.io/version": "1.4.2", "app.kubernetes.io/managed-by": "kubectl",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
					Time: &at, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(applied)},
				{Manager: "config-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
					Time: &at, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(updated)},
			},
		},
		Data: map[string]string{"log-level": "info", "feature-flags": "checkout=on,search=off", "config.yaml": "port: 8080\n"},
	}
}

// benchCacheHeap runs a controller over src until it has synced and returns how much the
// heap grew (each measured after a GC) for the controller's cache of every object: in
// use (HeapInuse, spans holding live objects) and live (HeapAlloc, live objects).
func benchCacheHeap(b *testing.B, src *fake.ListerWatcher[*corev1.ConfigMap, *corev1.ConfigMapList], opts controller.Options[*corev1.ConfigMap]) (inUse, live int64) {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := testctl.New(b, src, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	if err := c.WaitForSync(ctx); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := c.Store().Len(); n != benchObjects {
		b.Fatalf("cached %d objects, want %d", n, benchObjects)
	}
	cancel()
	<-done
	runtime.KeepAlive(c)
	return int64(after.HeapInuse) - int64(before.HeapInuse), int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// BenchmarkStripManagedFieldsMemory measures the heap a controller's cache of 10,000
// ConfigMaps takes with and without client.StripManagedFields as its transform, over
// controller/fake. It reports
//
//   - heap-MB: HeapInuse after the sync minus before, each after a GC; this
//     underestimates, as the cache partly fills spans the fake's garbage left free;
//   - live-MB: the same for HeapAlloc, the bytes of live objects, the more exact figure;
//   - B/object: live bytes per cached object;
//   - for transform=strip, when transform=none ran too, ratio and live-ratio: strip's
//     heap-MB and live-MB over none's.
func BenchmarkStripManagedFieldsMemory(b *testing.B) {
	src := fake.New[*corev1.ConfigMap, *corev1.ConfigMapList]()
	for i := range benchObjects {
		if _, err := src.Create(benchConfigMap(i)); err != nil {
			b.Fatal(err)
		}
	}
	const mb = 1 << 20
	var noneInUse, noneLive float64
	for _, bc := range []struct {
		name string
		opts controller.Options[*corev1.ConfigMap]
	}{
		{"transform=none", controller.Options[*corev1.ConfigMap]{}},
		{"transform=strip", controller.Options[*corev1.ConfigMap]{Options: reflect.Options[*corev1.ConfigMap]{Transform: client.StripManagedFields[*corev1.ConfigMap]}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var inUse, live, runs int64
			for b.Loop() {
				i, l := benchCacheHeap(b, src, bc.opts)
				inUse, live, runs = inUse+i, live+l, runs+1
			}
			inUseMB, liveMB := float64(inUse)/float64(runs)/mb, float64(live)/float64(runs)/mb
			b.ReportMetric(inUseMB, "heap-MB")
			b.ReportMetric(liveMB, "live-MB")
			b.ReportMetric(float64(live)/float64(runs)/benchObjects, "B/object")
			switch {
			case bc.name == "transform=none":
				noneInUse, noneLive = inUseMB, liveMB
			case noneInUse > 0 && noneLive > 0:
				b.ReportMetric(inUseMB/noneInUse, "ratio")
				b.ReportMetric(liveMB/noneLive, "live-ratio")
			}
		})
	}
}
