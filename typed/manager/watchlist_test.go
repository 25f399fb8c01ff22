package manager_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/manager"
)

var cmGVR = corev1.SchemeGroupVersion.WithResource("configmaps")

// syncsWithoutWatchList acquires a cache of src in namespace "a" from a Manager with the
// default options (watch-list on), and checks that it syncs with the object "a/one"
// well before a stalled watch-list would fall back (reflect.WatchListStall), that an
// object created afterwards with create arrives, and that fake was never asked for a
// watch-list, which it would accept and never end.
func syncsWithoutWatchList[T event.Object, L reflect.List](t *testing.T, src manager.Source[T, L], fake *k8stesting.Fake, create func(ctx context.Context, name string) error) {
	t.Helper()
	m := manager.New(manager.Options{})
	run(t, m)
	c, err := manager.Acquire(m, src, manager.CacheOptions[T]{Namespaces: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	ctx, cancel := context.WithTimeout(testContext(t), reflect.WatchListStall/3)
	defer cancel()
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatalf("the cache did not sync: %v", err)
	}
	if got := keys(c.List()); len(got) != 1 || got[0] != "a/one" {
		t.Errorf("cached %v, want [a/one]", got)
	}
	if err := create(ctx, "two"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a/two in the cache", func() bool { return len(c.List()) == 2 })
	for _, a := range fake.Actions() {
		if w, ok := a.(k8stesting.WatchActionImpl); ok && w.ListOptions.SendInitialEvents != nil {
			t.Errorf("the fake was asked for a watch-list: %+v", w.ListOptions)
		}
	}
}

func unstructuredConfigMap(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace("a")
	u.SetName(name)
	return u
}

func newDynamicFake() *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{cmGVR: "ConfigMapList"}, unstructuredConfigMap("one"))
}

// ownDynamic is a user's dynamic.Interface that says it cannot serve watch-list, over
// resource clients that do not say it themselves.
type ownDynamic struct{ dynamic.Interface }

func (ownDynamic) IsWatchListSemanticsUnSupported() bool { return true }

func (d ownDynamic) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return ownResource{d.Interface.Resource(gvr)}
}

type ownResource struct {
	dynamic.NamespaceableResourceInterface
}

func (r ownResource) Namespace(ns string) dynamic.ResourceInterface {
	return struct{ dynamic.ResourceInterface }{r.NamespaceableResourceInterface.Namespace(ns)}
}

// With watch-list on by default, a cache over any of client-go's fake clients, which
// accept a watch-list request and never end its initial events, lists instead and
// syncs, with no option: the fake clientset's typed clients, the dynamic fake (through
// manager.Dynamic and through client.Dynamic's typed adapter), the metadata fake, and a
// dynamic.Interface that only says so itself.
func TestCachesOverClientGoFakesSyncWithWatchListOnByDefault(t *testing.T) {
	t.Run("fake clientset", func(t *testing.T) {
		cs := kubefake.NewClientset(configMap("a", "one", nil))
		syncsWithoutWatchList(t, manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps), &cs.Fake, func(ctx context.Context, name string) error {
			_, err := cs.CoreV1().ConfigMaps("a").Create(ctx, configMap("a", name, nil), metav1.CreateOptions{})
			return err
		})
	})
	createUnstructured := func(dyn dynamic.Interface) func(context.Context, string) error {
		return func(ctx context.Context, name string) error {
			_, err := dyn.Resource(cmGVR).Namespace("a").Create(ctx, unstructuredConfigMap(name), metav1.CreateOptions{})
			return err
		}
	}
	t.Run("dynamic fake through manager.Dynamic", func(t *testing.T) {
		dyn := newDynamicFake()
		syncsWithoutWatchList(t, manager.Dynamic(dyn, cmGVR, false), &dyn.Fake, createUnstructured(dyn))
	})
	t.Run("dynamic fake through client.Dynamic", func(t *testing.T) {
		dyn := newDynamicFake()
		syncsWithoutWatchList(t, manager.Namespaced[*corev1.ConfigMap](client.FromDynamicNamespaced[*corev1.ConfigMap](dyn.Resource(cmGVR))), &dyn.Fake, createUnstructured(dyn))
	})
	t.Run("a dynamic.Interface that says it cannot serve watch-list", func(t *testing.T) {
		dyn := newDynamicFake()
		if reflect.WatchListUnsupported(ownDynamic{dyn}.Resource(cmGVR).Namespace("a")) {
			t.Fatal("the test's resource client says it cannot serve watch-list: the test would not test manager.Dynamic")
		}
		syncsWithoutWatchList(t, manager.Dynamic(ownDynamic{dyn}, cmGVR, false), &dyn.Fake, createUnstructured(dyn))
	})
	t.Run("metadata fake", func(t *testing.T) {
		scheme := metadatafake.NewTestScheme()
		if err := metav1.AddMetaToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		md := metadatafake.NewSimpleMetadataClient(scheme, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "one"}})
		src := manager.Source[*metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList]{
			Resource: "configmaps",
			ListerWatcher: func(ns string) controller.ListerWatcher[*metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList] {
				return md.Resource(cmGVR).Namespace(ns)
			},
		}
		syncsWithoutWatchList(t, src, &md.Fake, func(ctx context.Context, name string) error {
			return md.Tracker().Add(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name}})
		})
	})
}

// A Source whose ListerWatcher is a typed nil, or whose client is one, is an error of
// Acquire, not a panic while asking it whether it serves watch-list.
func TestTypedNilClientsAreAcquireErrorsWithWatchListOn(t *testing.T) {
	m := manager.New(manager.Options{})
	run(t, m)
	var nilDynamic *dynamicfake.FakeDynamicClient
	if _, err := manager.Acquire(m, manager.Dynamic(nilDynamic, cmGVR, false)); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Acquire of manager.Dynamic over a typed-nil client: %v, want an error wrapping controller.ErrNilArgument", err)
	}
	src := manager.Namespaced[*corev1.ConfigMap](func(string) *client.Dynamic[*corev1.ConfigMap] { return nil })
	if _, err := manager.Acquire(m, src); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Acquire of a Source returning a typed-nil *client.Dynamic: %v, want an error wrapping controller.ErrNilArgument", err)
	}
}
