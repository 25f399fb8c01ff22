package write_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/write"
)

// webOwner is the owner of the tests' owned objects: Deployment shop/web as read from the
// server (typed clients' objects carry no TypeMeta).
func webOwner() *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web"}}
}

// webRef is the controller reference to webOwner, written out.
var webRef = metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid-web",
	Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}

// owned returns ConfigMap shop/web-config at resource version rv with data and owner
// references.
func owned(rv string, data map[string]string, refs ...metav1.OwnerReference) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-config", ResourceVersion: rv, OwnerReferences: refs}, Data: data}
}

// mapCache is a CacheReader over a map from namespace/name.
type mapCache[T any] map[string]T

func (c mapCache[T]) GetByName(namespace, name string) (T, bool) {
	obj, ok := c[namespace+"/"+name]
	return obj, ok
}

func TestOwnedCreateOrUpdate(t *testing.T) {
	const (
		get    = "get configmaps shop/web-config"
		create = "create configmaps shop/web-config"
		update = "update configmaps shop/web-config"
	)
	hello := map[string]string{"greeting": "hello"}
	setHello := func(cm *corev1.ConfigMap) { cm.Data = map[string]string{"greeting": "hello"} }
	otherRef := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: "uid-api", Controller: ptr.To(true)}
	plainRef := metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "shop", UID: "uid-shop"}
	tests := []struct {
		name string
		// stored is the server's object (none when nil), cached the cache's (no cache when nil).
		stored, cached *corev1.ConfigMap
		react          func(t *testing.T, cs *kubefake.Clientset)
		mutate         func(*corev1.ConfigMap) // setHello when nil

		wantChange  write.Change
		wantErr     error
		wantCalls   []string
		wantWritten []*corev1.ConfigMap
	}{{
		name:        "an absent object is created with a controller reference to its owner",
		wantChange:  write.Created,
		wantCalls:   []string{get, create},
		wantWritten: []*corev1.ConfigMap{owned("", hello, webRef)},
	}, {
		name:       "an object that already is as desired is read and not written",
		stored:     owned("5", hello, webRef),
		wantChange: write.Unchanged,
		wantCalls:  []string{get},
	}, {
		name:       "an object that already is as desired in the cache costs no API call",
		stored:     owned("5", hello, webRef),
		cached:     owned("5", hello, webRef),
		wantChange: write.Unchanged,
	}, {
		name:       "a stale cache is not trusted: the server's object is read, and not written when it is as desired",
		stored:     owned("5", hello, webRef),
		cached:     owned("4", map[string]string{"greeting": "hi"}, webRef),
		wantChange: write.Unchanged,
		wantCalls:  []string{get},
	}, {
		name: "a different object is updated at the resource version read, keeping others' labels and owner references",
		stored: func() *corev1.ConfigMap {
			cm := owned("5", map[string]string{"greeting": "hi", "stale": "x"}, plainRef, webRef)
			cm.Labels = map[string]string{"team": "a"}
			return cm
		}(),
		wantChange: write.Updated,
		wantCalls:  []string{get, update},
		wantWritten: []*corev1.ConfigMap{func() *corev1.ConfigMap {
			cm := owned("5", hello, plainRef, webRef)
			cm.Labels = map[string]string{"team": "a"}
			return cm
		}()},
	}, {
		name:        "an object with no controller is adopted",
		stored:      owned("5", hello, plainRef),
		wantChange:  write.Updated,
		wantCalls:   []string{get, update},
		wantWritten: []*corev1.ConfigMap{owned("5", hello, plainRef, webRef)},
	}, {
		name:        "a reference to the owner that is not a controller reference becomes one",
		stored:      owned("5", hello, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid-web"}),
		wantChange:  write.Updated,
		wantCalls:   []string{get, update},
		wantWritten: []*corev1.ConfigMap{owned("5", hello, webRef)},
	}, {
		name:       "an object controlled by another owner is refused and never written",
		stored:     owned("5", map[string]string{"greeting": "theirs"}, otherRef),
		cached:     owned("5", map[string]string{"greeting": "theirs"}, otherRef),
		wantChange: write.Unchanged,
		wantErr:    &write.OwnerConflictError{Controller: otherRef, Wanted: webRef},
		wantCalls:  []string{get},
	}, {
		name:   "an update that conflicts is retried on the object read again",
		stored: owned("5", nil, webRef),
		react: func(t *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("update", "configmaps", failFirst(1, "update", "", conflict("configmaps"),
				setStoredConfigMap(t, cs, owned("6", map[string]string{"other": "y"}, webRef))))
		},
		wantChange:  write.Updated,
		wantCalls:   []string{get, update, get, update},
		wantWritten: []*corev1.ConfigMap{owned("5", hello, webRef), owned("6", hello, webRef)},
	}, {
		name: "a create that finds the object created meanwhile reads it and updates it",
		react: func(t *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("create", "configmaps", failFirst(1, "create", "", alreadyExists("configmaps"), func() {
				if err := cs.Tracker().Add(owned("7", map[string]string{"greeting": "hi"})); err != nil {
					t.Error(err)
				}
			}))
		},
		wantChange:  write.Updated,
		wantCalls:   []string{get, create, get, update},
		wantWritten: []*corev1.ConfigMap{owned("", hello, webRef), owned("7", hello, webRef)},
	}, {
		name:   "an update that conflicts every time fails with the conflict after retry.DefaultRetry's 5 tries",
		stored: owned("5", nil, webRef),
		react: func(_ *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("update", "configmaps", failFirst(-1, "update", "", conflict("configmaps"), nil))
		},
		wantChange:  write.Unchanged,
		wantErr:     conflict("configmaps")("web-config"),
		wantCalls:   repeat(5, get, update),
		wantWritten: repeat(5, owned("5", hello, webRef)),
	}, {
		name:       "a mutation that renames the object is refused",
		mutate:     func(cm *corev1.ConfigMap) { cm.Name = "elsewhere" },
		wantChange: write.Unchanged,
		wantErr:    errors.New("the mutation changed the object's namespace/name to shop/elsewhere"),
		wantCalls:  []string{get},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := kubefake.NewClientset()
			if tt.stored != nil {
				cs = kubefake.NewClientset(tt.stored.DeepCopy())
			}
			if tt.react != nil {
				tt.react(t, cs)
			}
			o := write.NewOwned[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind)
			var cache mapCache[*corev1.ConfigMap]
			if tt.cached != nil {
				cache = mapCache[*corev1.ConfigMap]{"shop/web-config": tt.cached.DeepCopy()}
				o = o.WithCache(cache)
			}
			mutate := tt.mutate
			if mutate == nil {
				mutate = setHello
			}

			change, err := o.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", mutate)

			if change != tt.wantChange {
				t.Errorf("CreateOrUpdate returned %q, want %q", change, tt.wantChange)
			}
			checkOwnedErr(t, err, tt.wantErr)
			if diff := cmp.Diff(tt.wantCalls, apiCalls(&cs.Fake)); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			noManagedFields := cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ManagedFields")
			if diff := cmp.Diff(tt.wantWritten, written[*corev1.ConfigMap](t, &cs.Fake), noManagedFields); diff != "" {
				t.Errorf("objects written (-want +got):\n%s", diff)
			}
			if tt.cached != nil {
				if diff := cmp.Diff(tt.cached, cache["shop/web-config"]); diff != "" {
					t.Errorf("CreateOrUpdate modified the cached object (-before +after):\n%s", diff)
				}
			}
		})
	}
}

// checkOwnedErr fails t unless err is a WriteError for shop/web-config wrapping an error
// like want (equal for an *OwnerConflictError, by reason for an API error, by message
// otherwise), or both are nil.
func checkOwnedErr(t *testing.T, err, want error) {
	t.Helper()
	checkOwnedOpErr(t, "creating or updating", err, want)
}

// checkOwnedOpErr is checkOwnedErr for a WriteError of op.
func checkOwnedOpErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if want == nil || err == nil {
		checkErr(t, err, want)
		return
	}
	var we *write.WriteError
	if !errors.As(err, &we) || we.Op != op || we.Kind != "ConfigMap" || we.Namespace != "shop" || we.Name != "web-config" {
		t.Errorf("error %v is not a WriteError for %s ConfigMap shop/web-config", err, op)
		return
	}
	var wantConflict, gotConflict *write.OwnerConflictError
	switch {
	case errors.As(want, &wantConflict):
		if !errors.As(err, &gotConflict) || !errors.Is(err, write.ErrControlledByOther) {
			t.Errorf("error %v is not an OwnerConflictError and ErrControlledByOther", err)
		} else if diff := cmp.Diff(wantConflict, gotConflict); diff != "" {
			t.Errorf("OwnerConflictError (-want +got):\n%s", diff)
		}
	case errors.As(want, new(interface{ Status() metav1.Status })):
		checkErr(t, err, want)
	default:
		if we.Err.Error() != want.Error() {
			t.Errorf("error cause %q, want %q", we.Err, want)
		}
	}
}

// setStoredConfigMap replaces the ConfigMap the fake holds, as another writer would.
func setStoredConfigMap(t *testing.T, cs *kubefake.Clientset, cm *corev1.ConfigMap) func() {
	return func() {
		if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, cm.Namespace); err != nil {
			t.Errorf("changing the stored object: %v", err)
		}
	}
}

func TestOwnedConflictSaysWhichObjectAndWhoControlsIt(t *testing.T) {
	otherRef := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: "uid-api", Controller: ptr.To(true)}
	cs := kubefake.NewClientset(owned("5", nil, otherRef))
	_, err := write.NewOwned[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind).
		CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", func(*corev1.ConfigMap) {})
	const msg = "creating or updating ConfigMap shop/web-config: controlled by another owner: " +
		"it is controlled by Deployment api (uid uid-api), not by Deployment web (uid uid-web)"
	if err == nil || err.Error() != msg {
		t.Errorf("error %v, want\n%s", err, msg)
	}
}

func TestOwnedRefusesBadInputWithoutAnAPICall(t *testing.T) {
	cs := kubefake.NewClientset()
	ok := write.NewOwned[*appsv1.Deployment](cs.CoreV1().ConfigMaps, deployKind)
	set := func(cm *corev1.ConfigMap) { cm.Data = map[string]string{"a": "b"} }
	noUID := webOwner()
	noUID.UID = ""
	typedAsService := webOwner()
	typedAsService.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	typedRight := webOwner()
	typedRight.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	tests := []struct {
		name      string
		o         *write.Owned[*appsv1.Deployment, *corev1.ConfigMap]
		owner     *appsv1.Deployment
		namespace string
		mutate    func(*corev1.ConfigMap)
		want      error
	}{
		{"an owner that was not read from the server (no UID)", ok, noUID, "shop", set, write.ErrInvalidOwner},
		{"an owner in another namespace", ok, webOwner(), "other", set, write.ErrInvalidOwner},
		{"an owner whose TypeMeta names another kind", ok, typedAsService, "shop", set, write.ErrInvalidOwner},
		{"an Owned made without an owner kind", write.NewOwned[*appsv1.Deployment](cs.CoreV1().ConfigMaps, schema.GroupVersionKind{}), webOwner(), "shop", set, write.ErrInvalidOwner},
		{"a nil owner", ok, nil, "shop", set, controller.ErrNilArgument},
		{"a nil mutation", ok, webOwner(), "shop", nil, controller.ErrNilArgument},
		{"a nil Owned", nil, webOwner(), "shop", set, controller.ErrNilArgument},
		{"nil clients", write.NewOwned[*appsv1.Deployment, *corev1.ConfigMap, corev1client.ConfigMapInterface](nil, deployKind), webOwner(), "shop", set, controller.ErrNilArgument},
		{"clients returning nil", write.NewOwned[*appsv1.Deployment](func(string) corev1client.ConfigMapInterface { return nil }, deployKind), webOwner(), "shop", set, controller.ErrNilArgument},
		{"an owner whose TypeMeta is right is fine", ok, typedRight, "shop", set, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs.ClearActions()
			_, err := tt.o.CreateOrUpdate(t.Context(), tt.owner, tt.namespace, "web-config", tt.mutate)
			if tt.want == nil {
				if err != nil {
					t.Errorf("CreateOrUpdate returned %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("CreateOrUpdate returned %v, want an error wrapping %v", err, tt.want)
			}
			var we *write.WriteError
			if !errors.As(err, &we) || we.Name != "web-config" {
				t.Errorf("error %v is not a WriteError naming web-config", err)
			}
			if calls := apiCalls(&cs.Fake); len(calls) != 0 {
				t.Errorf("API calls were made: %v", calls)
			}
		})
	}
}

func TestOwnedThroughTheDynamicClientOnACustomResourceStruct(t *testing.T) {
	dyn := fakeGadgets(t)
	gadgets := write.NewOwned[*appsv1.Deployment](client.FromDynamicNamespaced[*Gadget](dyn.Resource(gadgetGVR)), deployKind)
	mutate := func(g *Gadget) {
		g.TypeMeta = gadgetMeta // the dynamic client sends apiVersion and kind
		g.Spec.Size = 3
	}
	for _, want := range []write.Change{write.Created, write.Unchanged} {
		if got, err := gadgets.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-gadget", mutate); got != want || err != nil {
			t.Fatalf("CreateOrUpdate = %q, %v; want %q, nil", got, err, want)
		}
	}
	if diff := cmp.Diff([]string{"get gadgets shop/web-gadget", "create gadgets shop/web-gadget", "get gadgets shop/web-gadget"}, apiCalls(&dyn.Fake)); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	want := &Gadget{TypeMeta: gadgetMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-gadget",
		OwnerReferences: []metav1.OwnerReference{webRef}}, Spec: GadgetSpec{Size: 3}}
	if diff := cmp.Diff(want, storedGadget(t, dyn, "shop", "web-gadget")); diff != "" {
		t.Errorf("stored gadget (-want +got):\n%s", diff)
	}

	dyn.ClearActions()
	_, err := gadgets.CreateOrUpdate(t.Context(), webOwner(), "shop", "untyped", func(g *Gadget) { g.Spec.Size = 1 })
	if err == nil {
		t.Errorf("creating a gadget without apiVersion and kind succeeded")
	}
	if diff := cmp.Diff([]string{"get gadgets shop/untyped"}, apiCalls(&dyn.Fake)); diff != "" {
		t.Errorf("a gadget without apiVersion and kind was sent (-want +got):\n%s", diff)
	}
}
