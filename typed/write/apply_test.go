package write_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/consistency"
	"github.com/typedinformer/typedinformer/typed/write"
)

// Generated typed clients and client.Dynamic are apply clients as they are: a built-in
// kind's with its apply configuration as the intent, a custom resource's with its Go
// struct.
var (
	_ write.ApplyClient[*appsv1.Deployment, *appsv1ac.DeploymentApplyConfiguration]       = appsv1client.DeploymentInterface(nil)
	_ write.StatusApplyClient[*appsv1.Deployment, *appsv1ac.DeploymentApplyConfiguration] = appsv1client.DeploymentInterface(nil)
	_ write.OwnedApplyClient[*appsv1.Deployment, *appsv1ac.DeploymentApplyConfiguration]  = appsv1client.DeploymentInterface(nil)
	_ write.OwnedApplyClient[*Gadget, *Gadget]                                            = (*client.Dynamic[*Gadget])(nil)
	_ write.StatusApplyClient[*Gadget, *Gadget]                                           = (*client.Dynamic[*Gadget])(nil)
)

// webDeployment is the intent of a controller that owns the image and labels of
// Deployment shop/web, and not its replicas.
func webDeployment(image string) *appsv1ac.DeploymentApplyConfiguration {
	labels := map[string]string{"app": "web"}
	return appsv1ac.Deployment("web", "shop").WithLabels(labels).WithSpec(appsv1ac.DeploymentSpec().
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
		WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().
			WithContainers(corev1ac.Container().WithName("web").WithImage(image)))))
}

// replicas is the intent of a manager that owns only Deployment shop/web's replicas.
func replicas(n int32) *appsv1ac.DeploymentApplyConfiguration {
	return appsv1ac.Deployment("web", "shop").WithSpec(appsv1ac.DeploymentSpec().WithReplicas(n))
}

func storedDeployment(t *testing.T, cs *kubefake.Clientset) *appsv1.Deployment {
	t.Helper()
	d, err := cs.AppsV1().Deployments("shop").Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// DESIGN 20, "apply claims only the fields the user set": two field managers share one
// object, each applying its own fields again and again, and neither reverts the other.
// A manager that sets a field another owns, without force, gets an ApplyConflictError
// naming the field and its manager, and nothing is written; with force it takes the
// field. (The fake clientset of kubefake.NewClientset tracks managed fields as the
// server does.)
func TestTwoFieldManagersCoOwnAnObjectAndConflictsAreTyped(t *testing.T) {
	cs := kubefake.NewClientset()
	ctrl := write.NewApplier(cs.AppsV1().Deployments).WithFieldManager("controller")
	scaler := write.NewApplier(cs.AppsV1().Deployments).WithFieldManager("scaler")
	ctx := t.Context()

	for round := range 3 {
		image := fmt.Sprintf("web:%d", round)
		if _, err := ctrl.Apply(ctx, webDeployment(image)); err != nil {
			t.Fatalf("round %d: the controller's apply: %v", round, err)
		}
		if _, err := scaler.Apply(ctx, replicas(int32(round+2))); err != nil {
			t.Fatalf("round %d: the scaler's apply: %v", round, err)
		}
		if _, err := ctrl.Apply(ctx, webDeployment(image)); err != nil {
			t.Fatalf("round %d: the controller's second apply: %v", round, err)
		}
		d := storedDeployment(t, cs)
		if got := ptr.Deref(d.Spec.Replicas, -1); got != int32(round+2) {
			t.Errorf("round %d: the controller's apply changed the scaler's replicas to %d, want %d", round, got, round+2)
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
			t.Errorf("round %d: the scaler's apply changed the controller's image to %q, want %q", round, got, image)
		}
	}

	before := storedDeployment(t, cs)
	withReplicas := webDeployment("web:2")
	withReplicas.Spec.WithReplicas(9)
	_, err := ctrl.Apply(ctx, withReplicas)
	var conflict *write.ApplyConflictError
	if !errors.As(err, &conflict) || !errors.Is(err, write.ErrApplyConflict) || !apierrors.IsConflict(err) {
		t.Fatalf("applying the scaler's field without force gave %v, want an *ApplyConflictError that is ErrApplyConflict and a server conflict", err)
	}
	want := []write.FieldConflict{{Field: ".spec.replicas", Manager: "scaler", Message: `conflict with "scaler"`}}
	if diff := cmp.Diff(want, conflict.Conflicts); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	var we *write.WriteError
	if !errors.As(err, &we) || we.Namespace != "shop" || we.Name != "web" || we.Kind != "Deployment" {
		t.Errorf("the conflict is not a WriteError naming Deployment shop/web: %#v", we)
	}
	if after := storedDeployment(t, cs); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("a conflicting apply wrote the object: resource version %s, then %s", before.ResourceVersion, after.ResourceVersion)
	}

	if _, err := ctrl.WithForce(true).Apply(ctx, withReplicas); err != nil {
		t.Fatalf("a forced apply: %v", err)
	}
	if got := ptr.Deref(storedDeployment(t, cs).Spec.Replicas, -1); got != 9 {
		t.Errorf("a forced apply left replicas at %d, want 9", got)
	}
	if _, err := scaler.Apply(ctx, replicas(3)); !errors.Is(err, write.ErrApplyConflict) {
		t.Errorf("the field taken by force is the controller's now: the scaler's apply gave %v, want a conflict", err)
	}
}

// The server's conflict, as kube-apiserver writes it (managedfields' NewConflictError),
// becomes FieldConflicts, also for managers that wrote through a subresource or did not
// apply (an update is described with its API version and time); causes of other types
// are not conflicts.
func TestApplyConflictErrorReadsTheServersCauses(t *testing.T) {
	cs := kubefake.NewClientset()
	cs.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewApplyConflict([]metav1.StatusCause{
			{Type: metav1.CauseTypeFieldManagerConflict, Field: ".spec.replicas",
				Message: `conflict with "kubectl" with subresource "scale" using apps/v1 at 2026-11-27T20:00:00Z`},
			{Type: metav1.CauseTypeFieldManagerConflict, Field: `.spec.template.spec.containers[name="web"].image`,
				Message: `conflict with "kubectl-edit" using apps/v1`},
			{Type: metav1.CauseTypeFieldValueInvalid, Field: ".spec", Message: "not a conflict"},
		}, "Apply failed with 2 conflicts")
	})
	_, err := write.NewApplier(cs.AppsV1().Deployments).WithFieldManager("controller").Apply(t.Context(), webDeployment("web:1"))
	var conflict *write.ApplyConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("got %v, want an *ApplyConflictError", err)
	}
	want := []write.FieldConflict{
		{Field: ".spec.replicas", Manager: "kubectl", Subresource: "scale", Message: `conflict with "kubectl" with subresource "scale" using apps/v1 at 2026-11-27T20:00:00Z`},
		{Field: `.spec.template.spec.containers[name="web"].image`, Manager: "kubectl-edit", Message: `conflict with "kubectl-edit" using apps/v1`},
	}
	if diff := cmp.Diff(want, conflict.Conflicts); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	const msg = `applying Deployment shop/web: apply conflict: .spec.replicas is owned by "kubectl" (through subresource scale), .spec.template.spec.containers[name="web"].image is owned by "kubectl-edit"`
	if err.Error() != msg {
		t.Errorf("the error says\n%s\nwant\n%s", err, msg)
	}
}

// A failed apply that is not a conflict keeps the package's conventions: a WriteError
// naming the object and wrapping the server's error, and nothing recorded for the
// reconcile. A 409 without field manager causes is not an ApplyConflictError.
func TestApplyFailuresAreWriteErrorsAndRecordNothing(t *testing.T) {
	for name, serverErr := range map[string]error{
		"500":                apierrors.NewInternalError(errors.New("etcd is down")),
		"409 without causes": apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New("modified")),
		"generic":            apierrors.NewGenericServerResponse(http.StatusServiceUnavailable, "patch", schema.GroupResource{}, "web", "", 0, false),
	} {
		t.Run(name, func(t *testing.T) {
			cs := kubefake.NewClientset()
			cs.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, serverErr })
			rec := &recorded{}
			ctx := consistency.WithRecorder(write.WithFieldManager(t.Context(), "controller"), rec)
			_, err := write.NewApplier(cs.AppsV1().Deployments).Apply(ctx, webDeployment("web:1"))
			var we *write.WriteError
			if !errors.As(err, &we) || we.Name != "web" || we.Namespace != "shop" || we.Op != "applying" {
				t.Fatalf("got %v, want a WriteError applying shop/web", err)
			}
			if apierrors.ReasonForError(err) != apierrors.ReasonForError(serverErr) {
				t.Errorf("the error %v does not wrap the server's %v", err, serverErr)
			}
			if errors.Is(err, write.ErrApplyConflict) {
				t.Errorf("%v is taken for an apply conflict", err)
			}
			if got := rec.all(); len(got) != 0 {
				t.Errorf("a failed apply recorded %v", got)
			}
		})
	}
}

// The field manager is named once: the Manager puts it in the context; a writer's own
// (WithFieldManager) wins; with neither, nothing is sent and the error says so, rather
// than a guessed name claiming fields for a program that is not theirs.
func TestTheFieldManagerComesFromTheWriterOrElseTheContext(t *testing.T) {
	tests := []struct {
		name        string
		ctxManager  string
		ownManager  string
		wantManager string
		wantErr     error
	}{
		{name: "from the context", ctxManager: "operator", wantManager: "operator"},
		{name: "the writer's own wins", ctxManager: "operator", ownManager: "migration", wantManager: "migration"},
		{name: "the writer's own alone", ownManager: "migration", wantManager: "migration"},
		{name: "none is an error and no call", wantErr: write.ErrNoFieldManager},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := kubefake.NewClientset()
			ctx := t.Context()
			if tt.ctxManager != "" {
				ctx = write.WithFieldManager(ctx, tt.ctxManager)
			}
			a := write.NewApplier(cs.AppsV1().Deployments).WithFieldManager(tt.ownManager).WithForce(true)
			_, err := a.Apply(ctx, replicas(1))
			checkErr(t, err, tt.wantErr)
			var got []string
			for _, action := range cs.Actions() {
				p := action.(k8stesting.PatchActionImpl)
				if p.PatchType != types.ApplyPatchType || !ptr.Deref(p.PatchOptions.Force, false) {
					t.Errorf("a %s patch with force %v, want an apply with force", p.PatchType, p.PatchOptions.Force)
				}
				got = append(got, p.PatchOptions.FieldManager)
			}
			var want []string
			if tt.wantManager != "" {
				want = []string{tt.wantManager}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("field managers sent (-want +got):\n%s", diff)
			}
		})
	}
	if _, ok := write.FieldManagerFrom(nil); ok { //nolint:staticcheck // the attack
		t.Error("a nil context has a field manager")
	}
}

// DESIGN 18: nil and typed-nil arguments are errors wrapping controller.ErrNilArgument,
// never panics, and send nothing.
func TestApplyNilArgumentsAreErrorsNotPanics(t *testing.T) {
	cs := kubefake.NewClientset()
	ctx := write.WithFieldManager(t.Context(), "controller")
	var nilApplier *write.Applier[*appsv1.Deployment, *appsv1ac.DeploymentApplyConfiguration]
	var nilOwned *write.OwnedApplier[*appsv1.Deployment, *corev1.ConfigMap, *corev1ac.ConfigMapApplyConfiguration]
	var typedNilOwner *appsv1.Deployment
	var nilClients func(string) appsv1client.DeploymentInterface
	nilClient := func(string) appsv1client.DeploymentInterface { return nil }
	deployments := write.NewApplier(cs.AppsV1().Deployments)
	configMaps := write.NewOwnedApplier[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind)
	cm := corev1ac.ConfigMap("web-config", "shop")
	for name, apply := range map[string]func() error{
		"nil Applier": func() error {
			_, err := nilApplier.WithForce(true).WithFieldManager("x").Apply(ctx, replicas(1))
			return err
		},
		"nil clients":            func() error { _, err := write.NewApplier(nilClients).Apply(ctx, replicas(1)); return err },
		"a nil client":           func() error { _, err := write.NewApplier(nilClient).Apply(ctx, replicas(1)); return err },
		"a nil status client":    func() error { _, err := write.NewStatusApplier(nilClient).Apply(ctx, replicas(1)); return err },
		"a typed-nil intent":     func() error { _, err := deployments.Apply(ctx, nil); return err },
		"an intent with no name": func() error { _, err := deployments.Apply(ctx, appsv1ac.Deployment("", "shop")); return err },
		"nil OwnedApplier": func() error {
			_, err := nilOwned.WithCache(nil).WithForce(true).WithFieldManager("x").Apply(ctx, webOwner(), cm)
			return err
		},
		"nil owned clients": func() error {
			_, err := write.NewOwnedApplier[*appsv1.Deployment](nilClients, deployKind).Apply(ctx, webOwner(), replicas(1))
			return err
		},
		"a nil owned client": func() error {
			_, err := write.NewOwnedApplier[*appsv1.Deployment](nilClient, deployKind).Apply(ctx, webOwner(), replicas(1))
			return err
		},
		"a typed-nil owner": func() error { _, err := configMaps.Apply(ctx, typedNilOwner, cm); return err },
		"a typed-nil owned": func() error { _, err := configMaps.Apply(ctx, webOwner(), nil); return err },
		"a nil Dynamic": func() error {
			_, err := (*client.Dynamic[*Gadget])(nil).Apply(ctx, &Gadget{}, metav1.ApplyOptions{})
			return err
		},
		"a nil Dynamic's status": func() error {
			_, err := (*client.Dynamic[*Gadget])(nil).ApplyStatus(ctx, &Gadget{}, metav1.ApplyOptions{})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := apply(); !errors.Is(err, controller.ErrNilArgument) {
				t.Errorf("got %v, want an error wrapping controller.ErrNilArgument", err)
			}
		})
	}
	if calls := apiCalls(&cs.Fake); len(calls) != 0 {
		t.Errorf("nil arguments made API calls: %v", calls)
	}
}

// Owned objects are applied with the controller reference to their owner, and the
// server's answer is recorded for the reconcile (DESIGN 19). An object another owner
// controls is never applied to (DESIGN 20): seen in the cache it costs no call, seen on
// the server it costs the read, and taken by another owner between the check and the
// apply (the server refuses a second controller) it is the same typed error.
func TestOwnedApplierSetsTheControllerReferenceAndNeverTakesAnotherControllersObject(t *testing.T) {
	otherRef := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: "uid-api", Controller: ptr.To(true)}
	cm := func() *corev1ac.ConfigMapApplyConfiguration {
		return corev1ac.ConfigMap("web-config", "shop").WithData(map[string]string{"greeting": "hello"})
	}
	ctx := func(t *testing.T, rec *recorded) context.Context {
		return consistency.WithRecorder(write.WithFieldManager(t.Context(), "controller"), rec)
	}

	t.Run("applied with the controller reference, and recorded", func(t *testing.T) {
		cs := kubefake.NewClientset()
		rec := &recorded{}
		got, err := write.NewOwnedApplier[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).Apply(ctx(t, rec), webOwner(), cm())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]metav1.OwnerReference{webRef}, got.OwnerReferences); diff != "" {
			t.Errorf("owner references (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"web-config@" + got.ResourceVersion}, rec.all()); diff != "" {
			t.Errorf("recorded (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"get configmaps shop/web-config", "patch configmaps shop/web-config"}, apiCalls(&cs.Fake)); diff != "" {
			t.Errorf("API calls (-want +got):\n%s", diff)
		}
	})
	t.Run("another controller's object in the cache: refused with no call", func(t *testing.T) {
		cs := kubefake.NewClientset()
		rec := &recorded{}
		cache := mapCache[*corev1.ConfigMap]{"shop/web-config": owned("5", nil, otherRef)}
		_, err := write.NewOwnedApplier[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).WithCache(cache).Apply(ctx(t, rec), webOwner(), cm())
		checkOwnedOpErr(t, "applying", err, &write.OwnerConflictError{Controller: otherRef, Wanted: webRef})
		if calls := apiCalls(&cs.Fake); len(calls) != 0 {
			t.Errorf("API calls: %v", calls)
		}
	})
	t.Run("another controller's object on the server: refused after the read", func(t *testing.T) {
		cs := kubefake.NewClientset(owned("5", nil, otherRef))
		rec := &recorded{}
		_, err := write.NewOwnedApplier[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).Apply(ctx(t, rec), webOwner(), cm())
		checkOwnedOpErr(t, "applying", err, &write.OwnerConflictError{Controller: otherRef, Wanted: webRef})
		if diff := cmp.Diff([]string{"get configmaps shop/web-config"}, apiCalls(&cs.Fake)); diff != "" {
			t.Errorf("API calls (-want +got):\n%s", diff)
		}
		if len(rec.all()) != 0 {
			t.Errorf("recorded %v", rec.all())
		}
	})
	t.Run("taken by another controller since the cache saw it: the server's refusal is the typed error", func(t *testing.T) {
		cs := kubefake.NewClientset(owned("6", nil, otherRef))
		cs.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "web-config", nil)
		})
		cache := mapCache[*corev1.ConfigMap]{"shop/web-config": owned("5", nil)}
		_, err := write.NewOwnedApplier[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).WithCache(cache).Apply(ctx(t, &recorded{}), webOwner(), cm())
		checkOwnedOpErr(t, "applying", err, &write.OwnerConflictError{Controller: otherRef, Wanted: webRef})
	})
	t.Run("a stale cache shows no controller: the apply's precondition fails, and the object read again is refused", func(t *testing.T) {
		cs := kubefake.NewClientset(owned("6", nil, otherRef))
		var preconditions []string
		cs.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
			var sent corev1.ConfigMap
			if err := json.Unmarshal(a.(k8stesting.PatchActionImpl).Patch, &sent); err != nil {
				t.Error(err)
			}
			preconditions = append(preconditions, sent.ResourceVersion)
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "web-config", errors.New("the object has been modified"))
		})
		cache := mapCache[*corev1.ConfigMap]{"shop/web-config": owned("5", nil)}
		_, err := write.NewOwnedApplier[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).WithCache(cache).Apply(ctx(t, &recorded{}), webOwner(), cm())
		checkOwnedOpErr(t, "applying", err, &write.OwnerConflictError{Controller: otherRef, Wanted: webRef})
		if diff := cmp.Diff([]string{"patch configmaps shop/web-config", "get configmaps shop/web-config"}, apiCalls(&cs.Fake)); diff != "" {
			t.Errorf("API calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"5"}, preconditions); diff != "" {
			t.Errorf("resource versions sent as preconditions (-want +got):\n%s", diff)
		}
	})
	t.Run("an owner in another namespace cannot own it", func(t *testing.T) {
		cs := kubefake.NewClientset()
		_, err := write.NewOwnedApplier[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).
			Apply(ctx(t, &recorded{}), webOwner(), corev1ac.ConfigMap("web-config", "elsewhere"))
		if !errors.Is(err, write.ErrInvalidOwner) {
			t.Errorf("got %v, want ErrInvalidOwner", err)
		}
	})
}

// Applies of one writer from many goroutines (workers reconciling different keys, or a
// reconciler applying its children in parallel) are all made and all recorded.
func TestConcurrentAppliesAreAllMadeAndRecorded(t *testing.T) {
	cs := kubefake.NewClientset()
	rec := &recorded{}
	ctx := consistency.WithRecorder(write.WithFieldManager(t.Context(), "controller"), rec)
	configMaps := write.NewOwnedApplier[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).WithCache(mapCache[*corev1.ConfigMap]{})
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = configMaps.Apply(ctx, webOwner(), corev1ac.ConfigMap(fmt.Sprintf("cm-%d", i%5), "shop").WithData(map[string]string{"i": "x"}))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.all()); n != 20 {
		t.Errorf("%d of 20 applies recorded", n)
	}
	list, err := cs.CoreV1().ConfigMaps("shop").List(t.Context(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 5 {
		t.Fatalf("%d config maps (%v), want 5", len(list.Items), err)
	}
}

// A status applier applies through the status subresource.
func TestStatusApplierAppliesThroughTheStatusSubresource(t *testing.T) {
	cs := kubefake.NewClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}})
	status := write.NewStatusApplier(cs.AppsV1().Deployments).WithFieldManager("controller")
	if _, err := status.Apply(t.Context(), appsv1ac.Deployment("web", "shop").WithStatus(appsv1ac.DeploymentStatus().WithObservedGeneration(3))); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"patch deployments/status shop/web"}, apiCalls(&cs.Fake)); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}

// A custom resource's Go struct is applied through client.Dynamic with only the fields
// set: its unset optional fields (nil maps, an omitempty status, metadata's
// creationTimestamp) are not sent, so not claimed; a required field (no omitempty) is
// sent even when zero. Its status is applied alone through the status subresource.
func TestDynamicAppliesAGoStructsIntentOnly(t *testing.T) {
	dyn := fakeGadgets(t)
	var bodies []string
	dyn.PrependReactor("patch", "gadgets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchActionImpl)
		bodies = append(bodies, p.GetSubresource()+" "+strings.TrimSpace(string(p.Patch)))
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(p.Patch); err != nil {
			return true, nil, err
		}
		u.SetResourceVersion("7")
		return true, u, nil
	})
	gadgets := client.FromDynamicNamespaced[*Gadget](dyn.Resource(gadgetGVR))
	rec := &recorded{}
	ctx := consistency.WithRecorder(write.WithFieldManager(t.Context(), "controller"), rec)

	intent := &Gadget{TypeMeta: gadgetMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "g"}}
	got, err := write.NewOwnedApplier[*appsv1.Deployment](gadgets, deployKind).Apply(ctx, webOwner(), intent)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Size != 0 || len(got.OwnerReferences) != 1 {
		t.Errorf("applied %+v", got)
	}
	status := &Gadget{TypeMeta: gadgetMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "g", Labels: map[string]string{"dropped": "x"}},
		Spec: GadgetSpec{Size: 3}, Status: GadgetStatus{Ready: true}}
	if _, err := write.NewStatusApplier(gadgets).Apply(ctx, status); err != nil {
		t.Fatal(err)
	}
	want := []string{
		` {"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g","namespace":"shop","ownerReferences":[{"apiVersion":"apps/v1","blockOwnerDeletion":true,"controller":true,"kind":"Deployment","name":"web","uid":"uid-web"}]},"spec":{"size":0}}`,
		`status {"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g","namespace":"shop"},"status":{"ready":true}}`,
	}
	if diff := cmp.Diff(want, bodies); diff != "" {
		t.Errorf("applied intents (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"g@7", "g@7", "g@7", "g@7"}, rec.all()); diff != "" {
		t.Errorf("recorded (-want +got):\n%s", diff) // by client.Dynamic and by the writer
	}
}

// A built-in kind's own Go struct can be applied too (Structs): what was left unset
// (replicas, strategy, status, creationTimestamp) is not sent, so not claimed, and the
// apiVersion and kind come from client-go's scheme. The owned variant adds the
// controller reference as it does for apply configurations.
func TestStructsApplyABuiltInKindsGoStructWithOnlyWhatWasSet(t *testing.T) {
	cs := kubefake.NewClientset()
	ctx := write.WithFieldManager(t.Context(), "controller")
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: appsv1.DeploymentSpec{
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}}
	if _, err := write.NewApplier(write.Structs(cs.AppsV1().Deployments)).Apply(ctx, web); err != nil {
		t.Fatal(err)
	}
	if _, err := write.NewApplier(cs.AppsV1().Deployments).WithFieldManager("scaler").Apply(ctx, replicas(4)); err != nil {
		t.Fatal(err)
	}
	d, err := write.NewApplier(write.Structs(cs.AppsV1().Deployments)).Apply(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 4 {
		t.Errorf("the struct's apply changed the scaler's replicas to %d", got)
	}
	var sent []string
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok && p.PatchOptions.FieldManager == "controller" {
			sent = append(sent, strings.TrimSpace(string(p.Patch)))
		}
	}
	want := `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"web","namespace":"shop"},"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx"}]}}}}`
	if len(sent) != 2 || sent[0] != want || sent[1] != want {
		t.Errorf("intents sent:\n%s\nwant twice:\n%s", strings.Join(sent, "\n"), want)
	}
	d, err = write.NewOwnedApplier[*appsv1.Deployment](write.Structs(cs.AppsV1().Deployments), deployKind).
		Apply(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api", UID: "uid-api"}}, web)
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(d); ref == nil || ref.UID != "uid-api" {
		t.Errorf("owned struct apply: controller %v, want Deployment api", ref)
	}
	var nilClients func(string) appsv1client.DeploymentInterface
	if _, err := write.NewApplier(write.Structs(nilClients)).Apply(ctx, web); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("nil clients: %v", err)
	}
	nilClient := func(string) appsv1client.DeploymentInterface { return nil }
	if _, err := write.NewOwnedApplier[*appsv1.Deployment](write.Structs(nilClient), deployKind).Apply(ctx, webOwner(), web); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("a nil client: %v", err)
	}
}
