package e2e

// Sources (generated typed clients, the metadata client, a CRD through the dynamic client
// as a Go struct) narrowed by selectors, a dynamic watch's Stop, and the managedFields
// transform, as package typed provides them.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/client"
)

// convergeStore waits until s holds exactly what a fresh list returns, with each object
// described by describe (which should include the resource version, so that equal
// descriptions mean equal states, and what the test checks was converted or kept). A list
// that stays empty fails it: the test set nothing up.
func convergeStore[T event.Object](t *testing.T, what string, list func(context.Context) ([]T, error), describe func(T) string, s *eventcache.Store[T]) {
	t.Helper()
	nonEmpty := func(ctx context.Context) ([]T, error) {
		objs, err := list(ctx)
		if err == nil && len(objs) == 0 {
			err = errors.New("the fresh list is empty: the test set nothing up")
		}
		return objs, err
	}
	convergeDescribed(t, nonEmpty, describe, describedStoreView(s, what+": controller.Store()", describe))
}

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}
}

func newPod(name string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}, Spec: podSpec()}
}

// TestSources watches the real server through each kind of source — generated typed
// clients (Pods, ConfigMaps, Deployments) scoped to a namespace and narrowed by label and
// field selectors, the metadata client, and a CRD through the dynamic client converted to
// a hand-written Go struct — and checks that each controller's store converges to what a
// fresh list returns, before and after changes.
func TestSources(t *testing.T) {
	_, admin := setUp(t)
	cs := admin.kube
	ctx := context.Background()

	t.Run("pods by namespace and label", func(t *testing.T) {
		const ns, other = "pods", "pods-other"
		createNamespaces(t, cs, ns, other)
		pods := cs.CoreV1().Pods(ns)
		web, db := map[string]string{"app": "web"}, map[string]string{"app": "db"}
		for _, p := range []*corev1.Pod{newPod("web-1", web), newPod("web-2", web), newPod("db-1", db)} {
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cs.CoreV1().Pods(other).Create(ctx, newPod("web-elsewhere", web), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		selector := labels.SelectorFromSet(web)
		c := testctl.New(t, pods, controller.Options[*corev1.Pod]{Options: reflect.Options[*corev1.Pod]{ListOptions: client.Selectors(selector, nil)}})
		start(t, c)
		fresh := func(ctx context.Context) ([]*corev1.Pod, error) {
			return listed[*corev1.Pod](pods.List(ctx, metav1.ListOptions{LabelSelector: selector.String()}))
		}
		describe := func(p *corev1.Pod) string {
			return p.ResourceVersion + " " + p.Labels["app"] + " " + string(p.Status.Phase)
		}
		convergeStore(t, "initial", fresh, describe, c.Store())
		if diff := cmp.Diff([]string{ns + "/web-1", ns + "/web-2"}, c.Store().Keys()); diff != "" {
			t.Errorf("cached keys (-want +got):\n%s", diff)
		}

		// A pod that leaves the selector is deleted from the store, one that joins it added.
		if _, err := pods.Patch(ctx, "web-2", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"db"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Patch(ctx, "db-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"web"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Create(ctx, newPod("web-3", web), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := pods.Delete(ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		convergeStore(t, "after relabelling, adding and deleting", fresh, describe, c.Store())
		if diff := cmp.Diff([]string{ns + "/db-1", ns + "/web-3"}, c.Store().Keys()); diff != "" {
			t.Errorf("cached keys (-want +got):\n%s", diff)
		}
		for _, p := range c.Store().List() {
			if p.Status.Phase != corev1.PodPending {
				t.Errorf("pod %s phase %q, want Pending (no kubelet runs)", p.Name, p.Status.Phase)
			}
		}
	})

	t.Run("configmaps by field selector", func(t *testing.T) {
		const ns = "fields"
		createNamespaces(t, cs, ns)
		cms := cs.CoreV1().ConfigMaps(ns)
		for _, name := range []string{"target", "bystander"} {
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "1"}},
				metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		selector := fields.OneTermEqualSelector("metadata.name", "target")
		c := testctl.New(t, cms, controller.Options[*corev1.ConfigMap]{Options: reflect.Options[*corev1.ConfigMap]{ListOptions: client.Selectors(nil, selector)}})
		start(t, c)
		fresh := func(ctx context.Context) ([]*corev1.ConfigMap, error) {
			return listed[*corev1.ConfigMap](cms.List(ctx, metav1.ListOptions{FieldSelector: selector.String()}))
		}
		describe := func(c *corev1.ConfigMap) string { return c.ResourceVersion + " " + c.Data["v"] }
		convergeStore(t, "initial", fresh, describe, c.Store())
		for _, name := range []string{"target", "bystander"} {
			if _, err := cms.Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		convergeStore(t, "after an update", fresh, describe, c.Store())
		if diff := cmp.Diff([]string{ns + "/target"}, c.Store().Keys()); diff != "" {
			t.Errorf("cached keys (-want +got):\n%s", diff)
		}
		// Deleted and recreated: the store follows.
		if err := cms.Delete(ctx, "target", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the deletion reaches the store", func() (bool, string) {
			return c.Store().Len() == 0, fmt.Sprint(c.Store().Keys())
		})
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "target"}, Data: map[string]string{"v": "3"}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		convergeStore(t, "after recreation", fresh, describe, c.Store())
	})

	t.Run("deployments by label", func(t *testing.T) {
		const ns = "deployments"
		createNamespaces(t, cs, ns)
		deployments := cs.AppsV1().Deployments(ns)
		deployment := func(name, tier string) *appsv1.Deployment {
			lbls := map[string]string{"app": name, "tier": tier}
			return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}, Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbls}, Spec: podSpec()},
			}}
		}
		for _, d := range []*appsv1.Deployment{deployment("front", "web"), deployment("back", "api"), deployment("edge", "web")} {
			if _, err := deployments.Create(ctx, d, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		selector, err := labels.Parse("tier in (web)")
		if err != nil {
			t.Fatal(err)
		}
		c := testctl.New(t, deployments, controller.Options[*appsv1.Deployment]{Options: reflect.Options[*appsv1.Deployment]{ListOptions: client.Selectors(selector, nil)}})
		start(t, c)
		fresh := func(ctx context.Context) ([]*appsv1.Deployment, error) {
			return listed[*appsv1.Deployment](deployments.List(ctx, metav1.ListOptions{LabelSelector: selector.String()}))
		}
		describe := func(d *appsv1.Deployment) string {
			return fmt.Sprintf("%s replicas=%d", d.ResourceVersion, ptr.Deref(d.Spec.Replicas, -1))
		}
		convergeStore(t, "initial", fresh, describe, c.Store())
		if _, err := deployments.Patch(ctx, "front", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := deployments.Delete(ctx, "edge", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		convergeStore(t, "after scaling one and deleting another", fresh, describe, c.Store())
		if d, ok := c.Store().GetByName(ns, "front"); !ok || ptr.Deref(d.Spec.Replicas, 0) != 3 {
			t.Errorf("cached front = %v, want 3 replicas", d)
		}
	})

	t.Run("metadata only", func(t *testing.T) {
		const ns = "metadata"
		createNamespaces(t, cs, ns)
		secrets := cs.CoreV1().Secrets(ns)
		for i, team := range []string{"red", "blue", "red"} {
			if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i),
				Labels: map[string]string{"team": team}}, Data: map[string][]byte{"password": []byte("hunter2")}},
				metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		meta := admin.meta.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(ns)
		selector := labels.SelectorFromSet(labels.Set{"team": "red"})
		c := testctl.New(t, meta, controller.Options[*metav1.PartialObjectMetadata]{Options: reflect.Options[*metav1.PartialObjectMetadata]{ListOptions: client.Selectors(selector, nil)}})
		start(t, c)
		fresh := func(ctx context.Context) ([]*metav1.PartialObjectMetadata, error) {
			return listed[*metav1.PartialObjectMetadata](meta.List(ctx, metav1.ListOptions{LabelSelector: selector.String()}))
		}
		describe := func(m *metav1.PartialObjectMetadata) string {
			return fmt.Sprintf("%s %v %v", m.ResourceVersion, m.Labels, m.Annotations)
		}
		convergeStore(t, "initial", fresh, describe, c.Store())
		if _, err := secrets.Patch(ctx, "s-0", types.MergePatchType, []byte(`{"metadata":{"annotations":{"rotated":"yes"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := secrets.Patch(ctx, "s-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"red"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		convergeStore(t, "after annotating one and relabelling another", fresh, describe, c.Store())
		if m, ok := c.Store().GetByName(ns, "s-0"); !ok || m.Annotations["rotated"] != "yes" {
			t.Errorf("cached s-0 = %v, want the new annotation", m)
		}
		if diff := cmp.Diff([]string{ns + "/s-0", ns + "/s-1", ns + "/s-2"}, c.Store().Keys()); diff != "" {
			t.Errorf("cached keys (-want +got):\n%s", diff)
		}
	})

	t.Run("CRD as the user's own struct", func(t *testing.T) {
		installWidgetCRD(t, admin.dyn)
		const ns = "widgets"
		createNamespaces(t, cs, ns)
		widgets := admin.dyn.Resource(widgetGVR).Namespace(ns)
		for i, color := range []string{"red", "green", "blue"} {
			if _, err := widgets.Create(ctx, widget(ns, color, map[string]any{"size": int64(i + 1), "color": color}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		c := testctl.New(t, client.FromDynamic[*Widget](widgets), controller.Options[*Widget]{
			Options: reflect.Options[*Widget]{OnError: func(_ context.Context, err error) {
				if errors.Is(err, reflect.ErrIncompleteList) || errors.Is(err, reflect.ErrUnexpectedObject) {
					t.Errorf("conversion: %v", err)
				}
			}},
		})
		start(t, c)
		fresh := func(ctx context.Context) ([]*Widget, error) {
			l, err := client.FromDynamic[*Widget](widgets).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		}
		describe := func(g *Widget) string {
			return fmt.Sprintf("%s %s %s size=%d color=%s", g.ResourceVersion, g.APIVersion, g.Kind, g.Spec.Size, g.Spec.Color)
		}
		convergeStore(t, "initial", fresh, describe, c.Store())
		if _, err := widgets.Patch(ctx, "green", types.MergePatchType, []byte(`{"spec":{"size":42}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := widgets.Delete(ctx, "blue", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := widgets.Create(ctx, widget(ns, "violet", map[string]any{"size": int64(7), "color": "violet"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		convergeStore(t, "after an update, a deletion and a creation", fresh, describe, c.Store())
		g, ok := c.Store().GetByName(ns, "green")
		if !ok || g.Spec.Size != 42 || g.Spec.Color != "green" {
			t.Errorf("cached green = %+v, want size 42 and color green", g)
		} else if g.Kind != "Widget" || g.APIVersion != widgetGVR.GroupVersion().String() {
			t.Errorf("cached green has type meta %v, want Widget %s", g.TypeMeta, widgetGVR.GroupVersion())
		}
	})
}

// TestDynamicWatchStopEndsItsGoroutine stops a client.Dynamic watch while an event is
// on its way and nobody reads it any more, which is what the reflector does when its
// context ends or when it gives up on a watch to relist: Stop must end the watch's
// goroutine.
func TestDynamicWatchStopEndsItsGoroutine(t *testing.T) {
	// The explicit check below reports a leak before setUp's final one, with the
	// goroutine's stack.
	const ns = "dynamic-watch"
	_, admin := setUp(t, ns)
	cs, dyn := admin.kube, admin.dyn
	ctx := context.Background()
	// Any Go struct with JSON tags will do as the target; a ConfigMap needs no CRD.
	src := client.FromDynamic[*corev1.ConfigMap](dyn.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns))
	listed, err := src.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := src.Watch(ctx, metav1.ListOptions{ResourceVersion: listed.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unread"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The goroutines the watch started: any package client starts, or watch.Filter's.
	watchGoroutines := []string{"k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop(", "created by github.com/typedinformer/typedinformer/typed/client."}
	waitUntil(t, "the watch's goroutine holds the event, waiting for a reader", func() (bool, string) {
		return len(testwait.Goroutines(watchGoroutines, "chan send", "select")) > 0, "no goroutine of the watch is sending"
	})
	w.Stop() // the reader is gone
	var left []string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		left = testwait.Goroutines(watchGoroutines)
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("10s after Stop, the goroutine of the stopped watch is still blocked with the unread event: "+
			"Dynamic.Watch leaks a goroutine each time a watch is stopped with an event in flight:\n%s", strings.Join(left, "\n\n"))
	}
}

// TestStripManagedFieldsTransform runs two controllers over the same ConfigMaps, one
// with client.StripManagedFields as its transform: the server sets managedFields on every
// object (and server-side apply adds entries), the plain cache keeps them, the other
// caches the same objects without them.
func TestStripManagedFieldsTransform(t *testing.T) {
	const ns = "transform"
	_, admin := setUp(t, ns)
	cs := admin.kube
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps(ns)
	for _, name := range []string{"one", "two"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "1"}},
			metav1.CreateOptions{FieldManager: "e2e-create"}); err != nil {
			t.Fatal(err)
		}
	}
	plain := testctl.New(t, cms, controller.Options[*corev1.ConfigMap]{})
	stripped := testctl.New(t, cms, controller.Options[*corev1.ConfigMap]{Options: reflect.Options[*corev1.ConfigMap]{Transform: client.StripManagedFields[*corev1.ConfigMap]}})
	start(t, runAll{plain.Run, stripped.Run})

	check := func(step string, managers int) {
		t.Helper()
		fresh := func(ctx context.Context) ([]*corev1.ConfigMap, error) {
			return listed[*corev1.ConfigMap](cms.List(ctx, metav1.ListOptions{}))
		}
		describe := func(c *corev1.ConfigMap) string { return c.ResourceVersion + " " + c.Data["v"] + " " + c.Data["w"] }
		convergeStore(t, step+" (plain)", fresh, describe, plain.Store())
		convergeStore(t, step+" (stripped)", fresh, describe, stripped.Store())
		listed, err := fresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range listed {
			if len(obj.ManagedFields) != managers {
				t.Errorf("%s: the server returned %s with %d managedFields entries, want %d", step, obj.Name, len(obj.ManagedFields), managers)
			}
			key := ns + "/" + obj.Name
			if p, _ := plain.Store().Get(key); len(p.ManagedFields) != len(obj.ManagedFields) {
				t.Errorf("%s: plain cache has %s with %d managedFields entries, want %d", step, key, len(p.ManagedFields), len(obj.ManagedFields))
			}
			s, _ := stripped.Store().Get(key)
			if s.ManagedFields != nil {
				t.Errorf("%s: stripped cache has %s with managedFields %v, want none", step, key, s.ManagedFields)
			}
			if s.Data["v"] != obj.Data["v"] || s.Name != obj.Name || s.UID != obj.UID {
				t.Errorf("%s: stripped cache has %s = %v, want everything but managedFields of %v", step, key, s, obj)
			}
		}
	}
	check("created", 1)

	// Changes arrive through the watch, and are stripped too. Server-side apply by a
	// second manager adds a managedFields entry.
	apply := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s"},"data":{"w":"applied"}}`
	for _, name := range []string{"one", "two"} {
		if _, err := cms.Patch(ctx, name, types.ApplyPatchType, []byte(fmt.Sprintf(apply, name)),
			metav1.PatchOptions{FieldManager: "e2e-apply", Force: ptr.To(true)}); err != nil {
			t.Fatal(err)
		}
	}
	check("applied", 2)
}
