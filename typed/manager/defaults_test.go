package manager_test

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// A cache streams its initial state by default, falls back to a paged list on a server
// that refuses watch-list, and pages it always with Options.NoWatchList; each way it
// syncs with the same objects.
func TestCachesStreamTheInitialStateUnlessToldAndFallBackToLists(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        manager.Options
		refused     bool
		wantList    bool
		wantWatches bool // a watch-list request was made
	}{
		{name: "default", wantWatches: true},
		{name: "default, the server refuses watch-list", refused: true, wantList: true, wantWatches: true},
		{name: "NoWatchList", opts: manager.Options{NoWatchList: true}, wantList: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fake.New[cm, cmList](configMap("a", "one", nil), configMap("a", "two", nil))
			f.SetWatchListSupported(!tc.refused)
			m := manager.New(tc.opts)
			run(t, m)
			c := acquire(t, m, source(f))
			if err := c.WaitForSync(testContext(t)); err != nil {
				t.Fatal(err)
			}
			if got := keys(c.List()); len(got) != 2 {
				t.Errorf("cached %v, want a/one and a/two", got)
			}
			listed, watchListed := false, false
			for _, a := range f.Actions() {
				listed = listed || a.Verb == fake.VerbList
				si := a.Options.SendInitialEvents
				watchListed = watchListed || a.Verb == fake.VerbWatch && si != nil && *si && a.Options.ResourceVersionMatch == metav1.ResourceVersionMatchNotOlderThan
			}
			if listed != tc.wantList || watchListed != tc.wantWatches {
				t.Errorf("listed %v, asked for a watch-list %v; want %v, %v (requests %+v)", listed, watchListed, tc.wantList, tc.wantWatches, f.Actions())
			}
		})
	}
}

// A cache drops managedFields by default, before the cache's own transform, and keeps
// them with Options.KeepManagedFields.
func TestCachesDropManagedFieldsUnlessKept(t *testing.T) {
	withFields := func() cm {
		obj := configMap("a", "one", nil)
		obj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
		return obj
	}
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("KeepManagedFields=%v", keep), func(t *testing.T) { testManagedFields(t, keep, withFields()) })
	}
}

func testManagedFields(t *testing.T, keep bool, withFields cm) {
	f := fake.New[cm, cmList](withFields)
	m := manager.New(manager.Options{KeepManagedFields: keep})
	run(t, m)
	sawFields := make(chan bool, 1)
	c := acquire(t, m, source(f), manager.CacheOptions[cm]{TransformName: "label", Transform: func(obj cm) (cm, error) {
		select {
		case sawFields <- obj.ManagedFields != nil:
		default:
		}
		obj.Labels = map[string]string{"transformed": "yes"}
		return obj, nil
	}})
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	got, ok := c.GetByName("a", "one")
	if !ok || got.Labels["transformed"] != "yes" {
		t.Fatalf("KeepManagedFields %v: cached %v, %v; want a/one through the cache's transform", keep, got, ok)
	}
	if kept := got.ManagedFields != nil; kept != keep {
		t.Errorf("KeepManagedFields %v: cached managedFields %v", keep, got.ManagedFields)
	}
	if saw := receive(t, sawFields, "the transform's call"); saw != keep {
		t.Errorf("KeepManagedFields %v: the cache's transform saw managedFields: %v", keep, saw)
	}
}

// A cache makes the strings its objects repeat share one copy by default, and leaves
// them alone with Options.NoStringInterning.
func TestCachesInternRepeatedStringsUnlessTold(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoStringInterning=%v", off), func(t *testing.T) {
			// Each object's label value a copy of its own, as a decoder makes them.
			f := fake.New[cm, cmList](configMap("a", "one", map[string]string{"app": strings.Clone("web-frontend")}),
				configMap("a", "two", map[string]string{"app": strings.Clone("web-frontend")}))
			m := manager.New(manager.Options{NoStringInterning: off})
			run(t, m)
			c := acquire(t, m, source(f))
			if err := c.WaitForSync(testContext(t)); err != nil {
				t.Fatal(err)
			}
			one, _ := c.GetByName("a", "one")
			two, _ := c.GetByName("a", "two")
			if shared := unsafe.StringData(one.Labels["app"]) == unsafe.StringData(two.Labels["app"]); shared == off {
				t.Errorf("the label value held once: %v, want %v", shared, !off)
			}
		})
	}
}

// Over a client.Dynamic a cache that drops managedFields does not decode them at all: a
// ConfigMap whose managedFields would not convert is cached all the same, where with
// Options.KeepManagedFields it is left out (and logged, as any object that does not convert).
func TestCachesOverDynamicClientsDoNotDecodeManagedFieldsTheyDrop(t *testing.T) {
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("KeepManagedFields=%v", keep), func(t *testing.T) {
			broken := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"namespace": "a", "name": "broken", "managedFields": "not a list"},
			}}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "ConfigMapList"}, broken)
			m := manager.New(manager.Options{KeepManagedFields: keep})
			run(t, m)
			src := manager.Namespaced[cm](func(ns string) *client.Dynamic[cm] { return client.FromDynamic[cm](dyn.Resource(gvr).Namespace(ns)) })
			c, err := manager.Acquire(m, src, manager.CacheOptions[cm]{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			if err := c.WaitForSync(testContext(t)); err != nil {
				t.Fatal(err)
			}
			if _, cached := c.GetByName("a", "broken"); cached == keep {
				t.Errorf("the ConfigMap whose managedFields do not convert is cached: %v, want %v", cached, !keep)
			}
		})
	}
}
