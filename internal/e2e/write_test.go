package e2e

// The write side of package typed against a real kube-apiserver: Finalizer, StatusWriter,
// Owned and Recorder.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/write"
)

// Gadget is the Go type of a second custom resource, installed by installGadgetCRD with
// the status subresource, which the harness's Widget CRD does not have.
type Gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GadgetSpec   `json:"spec"`
	Status            GadgetStatus `json:"status,omitempty"`
}

type GadgetSpec struct {
	Size int `json:"size"`
}

type GadgetStatus struct {
	Ready              bool   `json:"ready,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	Note               string `json:"note,omitempty"`
}

func (g *Gadget) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// statusWidget reads widgets, whose CRD has no status subresource, as if they had a
// status.
type statusWidget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec"`
	Status            GadgetStatus `json:"status,omitempty"`
}

func (w *statusWidget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

var (
	gadgetGVR  = schema.GroupVersionResource{Group: "e2e.typedinformer.io", Version: "v1", Resource: "gadgets"}
	gadgetMeta = metav1.TypeMeta{APIVersion: "e2e.typedinformer.io/v1", Kind: "Gadget"}
	widgetKind = schema.GroupVersionKind{Group: widgetGVR.Group, Version: widgetGVR.Version, Kind: "Widget"}
)

// installGadgetCRD creates the CRD of gadgets, with the status subresource, and waits
// until gadgets are served.
func installGadgetCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	object := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props}
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": gadgetGVR.Resource + "." + gadgetGVR.Group},
		"spec": map[string]any{
			"group": gadgetGVR.Group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{
				"name": gadgetGVR.Version, "served": true, "storage": true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema": map[string]any{"openAPIV3Schema": object(map[string]any{
					"spec": object(map[string]any{"size": map[string]any{"type": "integer"}}),
					"status": object(map[string]any{
						"ready":              map[string]any{"type": "boolean"},
						"observedGeneration": map[string]any{"type": "integer"},
						"note":               map[string]any{"type": "string"},
					}),
				})},
			}},
		},
	}}
	if _, err := dyn.Resource(crdGVR).Create(timeout(t), crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the gadget CRD: %v", err)
	}
	waitFor(t, "gadgets to be served", func() bool {
		return try(t, func(ctx context.Context) error {
			_, err := dyn.Resource(gadgetGVR).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		})
	})
}

// countingStatus records the outcome of every UpdateStatus made through it: "ok" or the
// error's reason.
type countingStatus struct {
	*client.Dynamic[*Gadget]
	log *callLog
}

func (c countingStatus) UpdateStatus(ctx context.Context, g *Gadget, opts metav1.UpdateOptions) (*Gadget, error) {
	out, err := c.Dynamic.UpdateStatus(ctx, g, opts)
	c.log.add("updateStatus", err)
	return out, err
}

// recordingPatches records the outcome of every Patch made through it.
type recordingPatches struct {
	*client.Dynamic[*Widget]
	log *callLog
}

func (r recordingPatches) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*Widget, error) {
	out, err := r.Dynamic.Patch(ctx, name, pt, data, opts, subresources...)
	r.log.add("patch", err)
	return out, err
}

// recordingConfigMaps records every Get, Create and Update made through it.
type recordingConfigMaps struct {
	corev1client.ConfigMapInterface
	log *callLog
}

func (r recordingConfigMaps) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error) {
	out, err := r.ConfigMapInterface.Get(ctx, name, opts)
	r.log.add("get "+name, err)
	return out, err
}

func (r recordingConfigMaps) Create(ctx context.Context, cm *corev1.ConfigMap, opts metav1.CreateOptions) (*corev1.ConfigMap, error) {
	out, err := r.ConfigMapInterface.Create(ctx, cm, opts)
	r.log.add("create "+cm.Name, err)
	return out, err
}

func (r recordingConfigMaps) Update(ctx context.Context, cm *corev1.ConfigMap, opts metav1.UpdateOptions) (*corev1.ConfigMap, error) {
	out, err := r.ConfigMapInterface.Update(ctx, cm, opts)
	r.log.add("update "+cm.Name, err)
	return out, err
}

// callLog is the list of calls a wrapped client made, each "what: ok" or
// "what: <reason>".
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(what string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = string(apierrors.ReasonForError(err))
	}
	l.mu.Lock()
	l.calls = append(l.calls, what+": "+outcome)
	l.mu.Unlock()
}

// take returns the calls made since the last take.
func (l *callLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.calls
	l.calls = nil
	return out
}

// TestWriteSide runs the write side on one control plane, one subtest per writer.
func TestWriteSide(t *testing.T) {
	const ns = "write"
	_, admin := setUp(t, ns)
	installWidgetCRD(t, admin.dyn)
	installGadgetCRD(t, admin.dyn)
	widgets := client.FromDynamic[*Widget](admin.dyn.Resource(widgetGVR).Namespace(ns))
	createWidget := func(t *testing.T, name string) *Widget {
		t.Helper()
		w, err := widgets.Create(timeout(t), &Widget{TypeMeta: metav1.TypeMeta{APIVersion: widgetKind.GroupVersion().String(), Kind: "Widget"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: WidgetSpec{Size: 1}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating widget %s: %v", name, err)
		}
		return w
	}

	const finalizer = "e2e.typedinformer.io/cleanup"
	t.Run("FinalizerCleansUpBeforeAWidgetGoesAlsoWhenDeletedWhileNoLoopRan", func(t *testing.T) {
		cleaned := make(chan string, 10)
		fin := write.NewFinalizer(client.FromDynamicNamespaced[*Widget](admin.dyn.Resource(widgetGVR)), finalizer,
			func(_ context.Context, w *Widget) error {
				cleaned <- w.Name
				return nil
			})
		run := func() (stop func()) {
			c := testctl.New(t, client.FromDynamic[*Widget](admin.dyn.Resource(widgetGVR).Namespace(ns)), controller.Options[*Widget]{})
			loop, err := typed.NewLoop(c, typed.ReconcilerFunc[*Widget](func(ctx context.Context, req typed.Request[*Widget]) (typed.Result, error) {
				if deleted, err := fin.Handle(ctx, req); deleted || err != nil {
					return typed.Result{}, err
				}
				return typed.Result{}, nil
			}), typed.Options{Name: "finalizer"})
			if err != nil {
				t.Fatal(err)
			}
			return start(t, runAll{c.Run, loop.Run})
		}
		hasFinalizer := func(name string) func() (bool, string) {
			return func() (bool, string) {
				var w *Widget
				if !try(t, func(ctx context.Context) (err error) {
					w, err = widgets.Get(ctx, name, metav1.GetOptions{})
					return err
				}) {
					return false, "could not read " + name
				}
				return fmt.Sprint(w.Finalizers) == "["+finalizer+"]", fmt.Sprintf("%s has finalizers %v", name, w.Finalizers)
			}
		}
		gone := func(name string) func() (bool, string) {
			return func() (bool, string) {
				_, err := widgets.Get(timeout(t), name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), fmt.Sprintf("reading %s: %v", name, err)
			}
		}
		deleteWidget := func(name string) {
			t.Helper()
			if err := admin.dyn.Resource(widgetGVR).Namespace(ns).Delete(timeout(t), name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("deleting %s: %v", name, err)
			}
		}
		createWidget(t, "kept-a")
		createWidget(t, "kept-b")

		stop := run()
		waitUntil(t, "the loop to add its finalizer to kept-a", hasFinalizer("kept-a"))
		waitUntil(t, "the loop to add its finalizer to kept-b", hasFinalizer("kept-b"))
		deleteWidget("kept-a")
		if got := receive(t, cleaned, "the cleanup of kept-a"); got != "kept-a" {
			t.Errorf("cleaned up %s, want kept-a", got)
		}
		waitUntil(t, "kept-a to go once its finalizer is removed", gone("kept-a"))
		stop()

		// Deleted while no loop runs: the finalizer keeps it until the next loop cleans up.
		deleteWidget("kept-b")
		if b, err := widgets.Get(timeout(t), "kept-b", metav1.GetOptions{}); err != nil || b.DeletionTimestamp == nil {
			t.Fatalf("kept-b, deleted while no loop ran, is %v, %v; want it kept, marked for deletion", b, err)
		}
		stop = run()
		if got := receive(t, cleaned, "the cleanup of kept-b by the next loop"); got != "kept-b" {
			t.Errorf("cleaned up %s, want kept-b", got)
		}
		waitUntil(t, "kept-b to go once its finalizer is removed", gone("kept-b"))
		stop()
		if len(cleaned) > 0 {
			t.Errorf("%d more cleanups than deletions", len(cleaned))
		}
	})

	// A finalizer added from a stale read conflicts on the server, and is added again to
	// the current list: the finalizer another writer added meanwhile is kept.
	t.Run("FinalizerAddedFromAStaleReadKeepsTheFinalizerAddedMeanwhile", func(t *testing.T) {
		stale := createWidget(t, "raced")
		current := stale.DeepCopyObject().(*Widget)
		current.Finalizers = []string{"other.io/keep"}
		if _, err := widgets.Update(timeout(t), current, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		log := &callLog{}
		recorded := write.NewFinalizer(func(ns string) recordingPatches {
			return recordingPatches{client.FromDynamicNamespaced[*Widget](admin.dyn.Resource(widgetGVR))(ns), log}
		}, finalizer, func(context.Context, *Widget) error { return nil })
		if deleted, err := recorded.Handle(timeout(t), typed.Request[*Widget]{Object: stale}); deleted || err != nil {
			t.Fatalf("Handle of a stale widget = %v, %v; want false, nil", deleted, err)
		}
		if diff := cmp.Diff([]string{"patch: Conflict", "patch: ok"}, log.take()); diff != "" {
			t.Errorf("patches from a stale read (-want +got):\n%s", diff)
		}
		if w, err := widgets.Get(timeout(t), "raced", metav1.GetOptions{}); err != nil || fmt.Sprint(w.Finalizers) != "[other.io/keep "+finalizer+"]" {
			t.Errorf("raced widget: %v, %v; want finalizers [other.io/keep %s]", w, err, finalizer)
		}
	})

	t.Run("StatusWriterWritesAGadgetsStatusSubresourceOnlyWhenItChanges", func(t *testing.T) {
		gadgets := client.FromDynamicNamespaced[*Gadget](admin.dyn.Resource(gadgetGVR))
		log := &callLog{}
		status := write.NewStatusWriter(func(ns string) countingStatus { return countingStatus{gadgets(ns), log} },
			func(g *Gadget) *GadgetStatus { return &g.Status })
		created, err := gadgets(ns).Create(timeout(t), &Gadget{TypeMeta: gadgetMeta,
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "g1"}, Spec: GadgetSpec{Size: 2}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := func(st *GadgetStatus) {
			st.Ready = true
			st.ObservedGeneration = created.Generation
		}
		read := func() *Gadget {
			t.Helper()
			g, err := gadgets(ns).Get(timeout(t), "g1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return g
		}

		if err := status.Update(timeout(t), created, ready); err != nil {
			t.Fatal(err)
		}
		written := read()
		if diff := cmp.Diff(GadgetStatus{Ready: true, ObservedGeneration: 1}, written.Status); diff != "" {
			t.Errorf("status (-want +got):\n%s", diff)
		}
		if written.Generation != created.Generation || written.Spec != created.Spec {
			t.Errorf("the status write changed generation %d -> %d or spec %+v -> %+v", created.Generation, written.Generation, created.Spec, written.Spec)
		}
		if err := status.Update(timeout(t), written, ready); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"updateStatus: ok"}, log.take()); diff != "" {
			t.Errorf("UpdateStatus calls: a write that changes nothing must make none (-want +got):\n%s", diff)
		}

		// Another writer changes the status after the cached state was read.
		other := written.DeepCopyObject().(*Gadget)
		other.Status.Note = "from elsewhere"
		if _, err := gadgets(ns).UpdateStatus(timeout(t), other, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := status.Update(timeout(t), written, func(st *GadgetStatus) { st.Ready = false }); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"updateStatus: Conflict", "updateStatus: ok"}, log.take()); diff != "" {
			t.Errorf("UpdateStatus calls after a stale read (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(GadgetStatus{ObservedGeneration: 1, Note: "from elsewhere"}, read().Status); diff != "" {
			t.Errorf("status after the retry (-want +got): the other writer's note must be kept\n%s", diff)
		}

		if err := admin.dyn.Resource(gadgetGVR).Namespace(ns).Delete(timeout(t), "g1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err = status.Update(timeout(t), written, func(st *GadgetStatus) { st.Note = "too late" })
		var we *write.WriteError
		if !errors.Is(err, write.ErrGone) || !errors.As(err, &we) || we.Name != "g1" {
			t.Errorf("the status of a deleted gadget: %v, want a WriteError for g1 wrapping ErrGone", err)
		}
		if _, err := gadgets(ns).Get(timeout(t), "g1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the deleted gadget was brought back: %v", err)
		}

		// The harness's Widget CRD has no status subresource: the server says NotFound.
		createWidget(t, "no-status")
		statusWidgets := client.FromDynamicNamespaced[*statusWidget](admin.dyn.Resource(widgetGVR))
		w, err := statusWidgets(ns).Get(timeout(t), "no-status", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = write.NewStatusWriter(statusWidgets, func(w *statusWidget) *GadgetStatus { return &w.Status }).
			Update(timeout(t), w, func(st *GadgetStatus) { st.Ready = true })
		if !errors.Is(err, write.ErrNoStatusSubresource) || errors.Is(err, write.ErrGone) {
			t.Errorf("the status of a widget, whose CRD has no status subresource: %v, want ErrNoStatusSubresource", err)
		}
	})

	t.Run("OwnedConfigMapOfAWidgetIsCreatedOnceAndNotWrittenAgain", func(t *testing.T) {
		owner := createWidget(t, "owner")
		log := &callLog{}
		configMaps := write.NewOwned[*Widget](func(ns string) recordingConfigMaps {
			return recordingConfigMaps{admin.kube.CoreV1().ConfigMaps(ns), log}
		}, widgetKind)
		greet := func(greeting string) func(*corev1.ConfigMap) {
			return func(cm *corev1.ConfigMap) { cm.Data = map[string]string{"greeting": greeting} }
		}
		createOrUpdate := func(o *write.Owned[*Widget, *corev1.ConfigMap], name, greeting string, want write.Change, wantCalls ...string) {
			t.Helper()
			if got, err := o.CreateOrUpdate(timeout(t), owner, ns, name, greet(greeting)); got != want || err != nil {
				t.Fatalf("CreateOrUpdate(%s) = %q, %v; want %q", greeting, got, err, want)
			}
			if diff := cmp.Diff(wantCalls, log.take()); diff != "" {
				t.Errorf("API calls of CreateOrUpdate(%s) (-want +got):\n%s", greeting, diff)
			}
		}

		createOrUpdate(configMaps, "owner-config", "hello", write.Created, "get owner-config: NotFound", "create owner-config: ok")
		createOrUpdate(configMaps, "owner-config", "hello", write.Unchanged, "get owner-config: ok")
		cm, err := admin.kube.CoreV1().ConfigMaps(ns).Get(timeout(t), "owner-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantRef := []metav1.OwnerReference{{APIVersion: "e2e.typedinformer.io/v1", Kind: "Widget", Name: "owner", UID: owner.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		if diff := cmp.Diff(wantRef, cm.OwnerReferences); diff != "" {
			t.Errorf("owner references (-want +got):\n%s", diff)
		}

		// With a cache that holds it as desired, no API call at all.
		c := testctl.New(t, admin.kube.CoreV1().ConfigMaps(ns), controller.Options[*corev1.ConfigMap]{})
		stop := start(t, c)
		waitFor(t, "the cache to hold owner-config", func() bool {
			cached, ok := c.Store().GetByName(ns, "owner-config")
			return ok && cached.ResourceVersion == cm.ResourceVersion
		})
		cachedConfigMaps := configMaps.WithCache(c.Store())
		createOrUpdate(cachedConfigMaps, "owner-config", "hello", write.Unchanged)
		createOrUpdate(cachedConfigMaps, "owner-config", "bonjour", write.Updated, "get owner-config: ok", "update owner-config: ok")
		stop()

		// Another widget's ConfigMap is never taken over.
		other := createWidget(t, "other")
		foreign, err := admin.kube.CoreV1().ConfigMaps(ns).Create(timeout(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: "foreign", OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(other, widgetKind)}},
			Data: map[string]string{"greeting": "theirs"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = configMaps.CreateOrUpdate(timeout(t), owner, ns, "foreign", greet("mine"))
		var conflict *write.OwnerConflictError
		if !errors.Is(err, write.ErrControlledByOther) || !errors.As(err, &conflict) || conflict.Controller.UID != other.UID {
			t.Errorf("CreateOrUpdate of another widget's ConfigMap: %v, want an OwnerConflictError naming widget other", err)
		}
		after, err := admin.kube.CoreV1().ConfigMaps(ns).Get(timeout(t), "foreign", metav1.GetOptions{})
		if err != nil || after.ResourceVersion != foreign.ResourceVersion {
			t.Errorf("another widget's ConfigMap was written: %v, %v", after, err)
		}
	})

	t.Run("RecorderEventIsReadableThroughEventsV1", func(t *testing.T) {
		rec, err := write.NewRecorder(admin.kube, "typedinformer-e2e")
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, rec)
		regarding := createWidget(t, "eventful") // read through FromDynamic: it carries its apiVersion and kind
		related := createConfigMap(t, admin.kube, ns, "eventful-config", nil)
		rec.Eventf(regarding, related, corev1.EventTypeNormal, "Configured", "Configure", "wrote %s", related.Name)

		var got []string
		waitUntil(t, "the event to be readable through events.k8s.io/v1", func() (bool, string) {
			l, err := admin.kube.EventsV1().Events(ns).List(timeout(t), metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			got = nil
			for _, e := range l.Items {
				if e.Reason != "Configured" {
					continue
				}
				got = append(got, fmt.Sprintf("%s %s/%s uid=%v related=%s/%s %s %s %q by %s (%v)",
					e.Type, e.Regarding.Kind, e.Regarding.Name, e.Regarding.UID == regarding.UID,
					e.Related.Kind, e.Related.Name, e.Reason, e.Action, e.Note, e.ReportingController,
					strings.HasPrefix(e.ReportingInstance, "typedinformer-e2e-")))
			}
			return len(got) > 0, fmt.Sprintf("%d events, none with reason Configured", len(l.Items))
		})
		want := []string{`Normal Widget/eventful uid=true related=ConfigMap/eventful-config Configured Configure "wrote eventful-config" by typedinformer-e2e (true)`}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		stop()
	})
}
