package perturb

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func configMap(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace("default")
	u.SetName(name)
	return u
}

// events reads what w sends until it has n events, naming each "TYPE name@rv".
func events(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		e, ok := testwait.Receive(t, w.ResultChan(), fmt.Sprintf("event %d of %d (got %q)", len(out)+1, n, out), 10*time.Second), true
		if !ok {
			t.Fatalf("the watch ended after %q", out)
		}
		if s, ok := e.Object.(*metav1.Status); ok {
			out = append(out, fmt.Sprintf("%s %s", e.Type, s.Reason))
			continue
		}
		u := e.Object.(*unstructured.Unstructured)
		out = append(out, fmt.Sprintf("%s %s@%s", e.Type, u.GetName(), u.GetResourceVersion()))
	}
	return out
}

func same(t *testing.T, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q; want %q", got, want)
	}
}

func watchFrom(t *testing.T, c *cluster, rv string) watch.Interface {
	t.Helper()
	w, err := c.watch(configMaps, "default", metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}, func(u *unstructured.Unstructured) runtime.Object { return u })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func TestWatchesReplayLagAndDisconnect(t *testing.T) {
	c := newCluster(clocktesting.NewFakeClock(time.Now()), nil)
	t.Cleanup(c.shutdown)
	for _, n := range []string{"a", "b"} {
		if _, err := c.create(configMaps, "default", configMap(n)); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("from a resource version: what came after it, then a bookmark", func(t *testing.T) {
		same(t, events(t, watchFrom(t, c, "1"), 2), "ADDED b@2", "BOOKMARK @2")
	})
	t.Run("from none: the current objects as additions", func(t *testing.T) {
		same(t, events(t, watchFrom(t, c, ""), 2), "ADDED a@1", "ADDED b@2")
	})
	t.Run("a lag holds changes back, bookmarks included, until it has held its count", func(t *testing.T) {
		w := watchFrom(t, c, "2")
		same(t, events(t, w, 1), "BOOKMARK @2") // what a probe for progress waits for
		c.openWindow(configMaps, false, false, 2, time.Hour)
		c.create(configMaps, "default", configMap("c"))
		c.create(configMaps, "default", configMap("d"))
		select {
		case e := <-w.ResultChan():
			t.Fatalf("a lagging watch sent %v", e)
		case <-time.After(100 * time.Millisecond):
		}
		c.create(configMaps, "default", configMap("e")) // the third: the lag ends
		same(t, events(t, w, 4), "ADDED c@3", "ADDED d@4", "ADDED e@5", "BOOKMARK @5")
	})
	t.Run("a disconnection drops changes, then ends the watch with 410 Gone; a watch from before it gets Gone too", func(t *testing.T) {
		w := watchFrom(t, c, "5")
		same(t, events(t, w, 1), "BOOKMARK @5")
		c.openWindow(configMaps, true, false, 1, time.Hour)
		c.create(configMaps, "default", configMap("f"))
		c.create(configMaps, "default", configMap("g"))
		same(t, events(t, w, 1), "ERROR Expired")
		same(t, events(t, watchFrom(t, c, "5"), 1), "ERROR Expired")
		items, rv, _ := c.list(configMaps, "default", metav1.ListOptions{})
		if len(items) != 7 || rv != "7" {
			t.Errorf("the relist: %d objects at %s; want all 7 at 7", len(items), rv)
		}
	})
	t.Run("a version newer than the server's is refused", func(t *testing.T) {
		_, err := c.watch(configMaps, "default", metav1.ListOptions{ResourceVersion: "99"}, func(u *unstructured.Unstructured) runtime.Object { return u })
		if !apierrors.IsTimeout(err) {
			t.Errorf("error %v; want the server's too large resource version timeout", err)
		}
	})
}

func TestParsePath(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/configmaps/web":                 "/v1, Resource=configmaps ns web  true",
		"/api/v1/namespaces/ns/configmaps":                     "/v1, Resource=configmaps ns   true",
		"/apis/apps/v1/namespaces/ns/deployments/web/status":   "apps/v1, Resource=deployments ns web status true",
		"/apis/coordination.k8s.io/v1/namespaces/ns/leases/op": "coordination.k8s.io/v1, Resource=leases ns op  true",
		"/api/v1/namespaces":                                   "/v1, Resource=namespaces    true",
		"/apis/examples.typedinformer.io/v1/websites":          "examples.typedinformer.io/v1, Resource=websites    true",
		"/healthz": "/, Resource=    false",
	} {
		gvr, ns, name, sub, ok := parsePath(path)
		if got := fmt.Sprint(gvr, " ", ns, " ", name, " ", sub, " ", ok); got != want {
			t.Errorf("parsePath(%q) = %q; want %q", path, got, want)
		}
	}
}
