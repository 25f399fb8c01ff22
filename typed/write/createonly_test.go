package write_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed/consistency"
	"github.com/typedinformer/typedinformer/typed/write"
)

// Create-only owned objects (a Job, a PersistentVolumeClaim: specs that cannot change)
// are created when missing and never updated. The case that matters is the lagging
// cache: the object exists on the server (this controller created it a moment ago) but
// the cache does not show it yet. That is no error, makes no second object, and no
// update; the object found is recorded so that the key waits for its caches.
func TestCreateOnly(t *testing.T) {
	const (
		get    = "get configmaps shop/web-config"
		create = "create configmaps shop/web-config"
	)
	otherRef := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: "uid-api", Controller: ptr.To(true)}
	hello := map[string]string{"greeting": "hello"}
	build := func(cm *corev1.ConfigMap) { cm.Data = map[string]string{"greeting": "hello"} }
	tests := []struct {
		name string
		// stored is the server's object (none when nil), cached the cache's (an empty
		// cache when nil: the cache lags).
		stored, cached *corev1.ConfigMap
		react          func(t *testing.T, cs *kubefake.Clientset)

		wantChange   write.Change
		wantErr      error
		wantCalls    []string
		wantRecorded []string
		wantStored   *corev1.ConfigMap
	}{{
		name:         "a missing object is created with the controller reference",
		wantChange:   write.Created,
		wantCalls:    []string{create},
		wantRecorded: []string{"web-config@1"},
		wantStored:   owned("1", hello, webRef),
	}, {
		name:       "an object in the cache costs no call",
		stored:     owned("5", map[string]string{"greeting": "old"}, webRef),
		cached:     owned("5", map[string]string{"greeting": "old"}, webRef),
		wantChange: write.Unchanged,
		wantStored: owned("5", map[string]string{"greeting": "old"}, webRef),
	}, {
		name:         "an object the lagging cache does not show is found, not an error, and never updated",
		stored:       owned("5", map[string]string{"greeting": "old"}, webRef),
		wantChange:   write.Unchanged,
		wantCalls:    []string{create, get},
		wantRecorded: []string{"web-config@5"},
		wantStored:   owned("5", map[string]string{"greeting": "old"}, webRef),
	}, {
		name:       "another controller's object in the cache is refused with no call",
		stored:     owned("5", nil, otherRef),
		cached:     owned("5", nil, otherRef),
		wantChange: write.Unchanged,
		wantErr:    &write.OwnerConflictError{Controller: otherRef, Wanted: webRef},
		wantStored: owned("5", nil, otherRef),
	}, {
		name:       "another controller's object found on the server is refused",
		stored:     owned("5", nil, otherRef),
		wantChange: write.Unchanged,
		wantErr:    &write.OwnerConflictError{Controller: otherRef, Wanted: webRef},
		wantCalls:  []string{create, get},
		wantStored: owned("5", nil, otherRef),
	}, {
		name:       "an object with no controller is refused: adopting it would take an update",
		stored:     owned("5", nil),
		wantChange: write.Unchanged,
		wantErr:    &write.OwnerConflictError{Wanted: webRef},
		wantCalls:  []string{create, get},
		wantStored: owned("5", nil),
	}, {
		name: "an object deleted between the create that found it and the read is created again",
		react: func(t *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("create", "configmaps", failFirst(1, "create", "", alreadyExists("configmaps"), nil))
		},
		wantChange:   write.Created,
		wantCalls:    []string{create, get, create},
		wantRecorded: []string{"web-config@1"},
		wantStored:   owned("1", hello, webRef),
	}, {
		name: "a create the server fails is an error and records nothing",
		react: func(t *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("create", "configmaps", failFirst(-1, "create", "", func(string) error {
				return apierrors.NewInternalError(errors.New("etcd is down"))
			}, nil))
		},
		wantChange: write.Unchanged,
		wantErr:    apierrors.NewInternalError(errors.New("etcd is down")),
		wantCalls:  []string{create},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := kubefake.NewClientset()
			if tt.stored != nil {
				cs = kubefake.NewClientset(tt.stored.DeepCopy())
			}
			// The fake gives created objects no resource version, which the writers
			// need to record a write: this one answers a create with version 1.
			cs.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
				obj := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
				if err := cs.Tracker().Create(a.GetResource(), obj, a.GetNamespace()); err != nil {
					return true, nil, err
				}
				obj.ResourceVersion = "1"
				return true, obj, nil
			})
			if tt.react != nil {
				tt.react(t, cs)
			}
			cache := mapCache[*corev1.ConfigMap]{}
			if tt.cached != nil {
				cache["shop/web-config"] = tt.cached.DeepCopy()
			}
			rec := &recorded{}
			o := write.NewOwned[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).WithCache(cache)

			obj, change, err := o.CreateOnly(consistency.WithRecorder(t.Context(), rec), webOwner(), "shop", "web-config", build)

			if change != tt.wantChange {
				t.Errorf("CreateOnly returned %q, want %q", change, tt.wantChange)
			}
			checkOwnedOpErr(t, "creating", err, tt.wantErr)
			if err == nil && (obj == nil || obj.Name != "web-config") {
				t.Errorf("CreateOnly returned %v with no error", obj)
			}
			if diff := cmp.Diff(tt.wantCalls, apiCalls(&cs.Fake)); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRecorded, rec.all()); diff != "" {
				t.Errorf("recorded (-want +got):\n%s", diff)
			}
			list, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithKind("ConfigMap"), "shop")
			if err != nil {
				t.Fatal(err)
			}
			var stored []corev1.ConfigMap
			for _, cm := range list.(*corev1.ConfigMapList).Items {
				cm.ManagedFields, cm.TypeMeta = nil, metav1.TypeMeta{}
				if cm.ResourceVersion == "" {
					cm.ResourceVersion = "1" // created through the reactor above
				}
				stored = append(stored, cm)
			}
			var want []corev1.ConfigMap
			if tt.wantStored != nil {
				want = append(want, *tt.wantStored)
			}
			if diff := cmp.Diff(want, stored); diff != "" {
				t.Errorf("objects on the server (-want +got):\n%s", diff)
			}
		})
	}
}

// Many workers racing to create the same create-only object (its owner's key reconciled
// again before the cache shows the first create, or two owners' keys mapping to one
// name) make one object, and none fails.
func TestConcurrentCreateOnlyMakesOneObject(t *testing.T) {
	cs := kubefake.NewClientset()
	o := write.NewOwned[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).WithCache(mapCache[*corev1.ConfigMap]{})
	var wg sync.WaitGroup
	changes := make([]write.Change, 10)
	errs := make([]error, 10)
	for i := range changes {
		wg.Go(func() {
			_, changes[i], errs[i] = o.CreateOnly(t.Context(), webOwner(), "shop", "web-config", func(*corev1.ConfigMap) {})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, c := range changes {
		if c == write.Created {
			created++
		}
	}
	if created != 1 {
		t.Errorf("%d creates reported, want 1: %v", created, changes)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "update" || a.GetVerb() == "patch" {
			t.Errorf("CreateOnly made a %s", a.GetVerb())
		}
	}
}

// DESIGN 18: nil and typed-nil arguments, and a build that renames the object, are
// errors, never panics, and write nothing.
func TestCreateOnlyBadArgumentsAreErrors(t *testing.T) {
	cs := kubefake.NewClientset()
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		t.Errorf("an API call: %v", a)
		return false, nil, nil
	})
	var nilOwned *write.Owned[*appsv1.Deployment, *corev1.ConfigMap]
	var typedNilOwner *appsv1.Deployment
	o := write.NewOwned[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind)
	noop := func(*corev1.ConfigMap) {}
	for name, tc := range map[string]struct {
		call func() error
		want error
	}{
		"nil Owned":       {func() error { _, _, err := nilOwned.CreateOnly(t.Context(), webOwner(), "shop", "a", noop); return err }, controller.ErrNilArgument},
		"nil build":       {func() error { _, _, err := o.CreateOnly(t.Context(), webOwner(), "shop", "a", nil); return err }, controller.ErrNilArgument},
		"typed-nil owner": {func() error { _, _, err := o.CreateOnly(t.Context(), typedNilOwner, "shop", "a", noop); return err }, controller.ErrNilArgument},
		"no name":         {func() error { _, _, err := o.CreateOnly(t.Context(), webOwner(), "shop", "", noop); return err }, controller.ErrNilArgument},
		"owner elsewhere": {func() error { _, _, err := o.CreateOnly(t.Context(), webOwner(), "other", "a", noop); return err }, write.ErrInvalidOwner},
		"a nil client": {func() error {
			_, _, err := write.NewOwned[*appsv1.Deployment](func(string) corev1client.ConfigMapInterface { return nil }, deployKind).CreateOnly(t.Context(), webOwner(), "shop", "a", noop)
			return err
		}, controller.ErrNilArgument},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want an error wrapping %v", err, tc.want)
			}
		})
	}
	_, _, err := o.CreateOnly(t.Context(), webOwner(), "shop", "a", func(cm *corev1.ConfigMap) { cm.Name = "b" })
	if err == nil {
		t.Error("a build that renames the object is not an error")
	}
}
