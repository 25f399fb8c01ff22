package controller_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
)

// A cache that sees no event past a write catches up only by a bookmark: RequestProgress
// ends the watch and watches again from the same resource version, with nothing listed
// again, and with a timeout short enough that kube-apiserver's watch cache sends one; the
// bookmark raises Applied.
func TestRequestProgressWatchesAgainForABookmarkThatRaisesApplied(t *testing.T) {
	lw := fake.New[obj, list](&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}})
	c := testctl.New(t, lw, controller.Options[obj]{})
	run(t, c)
	testwait.Eventually(t, "the list applied", func() bool { rv, ok := c.Applied(); return ok && rv == 1 }, 10*time.Second)

	c.RequestProgress()
	testwait.Eventually(t, "a second watch", func() bool { return lw.WatchCalls() == 2 }, 10*time.Second)
	last := lw.Actions()[len(lw.Actions())-1]
	if last.Options.ResourceVersion != "1" || last.Options.TimeoutSeconds == nil || *last.Options.TimeoutSeconds != 3 || !last.Options.AllowWatchBookmarks {
		t.Fatalf("the watch for progress: %+v; want one from resource version 1, with bookmarks and a 3 s timeout", last.Options)
	}
	if n := lw.ListCalls(); n != 1 {
		t.Fatalf("%d lists: asking for progress must not list again", n)
	}
	if err := lw.WaitForWatchers(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	lw.Send(watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "50"}}})
	testwait.Eventually(t, "Applied at the bookmark", func() bool { rv, ok := c.Applied(); return ok && rv == 50 }, 10*time.Second)
}

// When bookmarks do not come, a consistent relist does what they would: RequestRelist
// lists again with resourceVersion "" and Applied reaches that list's version, although
// nothing the controller watches changed.
func TestRequestRelistListsConsistentlyAndRaisesApplied(t *testing.T) {
	lw := fake.New[obj, list](&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}})
	c := testctl.New(t, lw, controller.Options[obj]{})
	run(t, c)
	testwait.Eventually(t, "the list applied", func() bool { rv, ok := c.Applied(); return ok && rv == 1 }, 10*time.Second)
	lw.HoldWatches() // the watch shows nothing more
	if _, err := lw.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	c.RequestRelist()
	testwait.Eventually(t, "Applied at the relist's version", func() bool { rv, ok := c.Applied(); return ok && rv == 2 }, 10*time.Second)
	if _, ok := c.Get("ns/b"); !ok {
		t.Fatal("the relist's object is not in the store")
	}
	lists := 0
	for _, a := range lw.Actions() {
		if a.Verb == fake.VerbList {
			lists++
			if a.Options.ResourceVersion != "" {
				t.Errorf("a list from %q; want consistent lists only", a.Options.ResourceVersion)
			}
		}
	}
	if lists != 2 {
		t.Fatalf("%d lists; want the first and the relist", lists)
	}
	lw.ReleaseWatches()
}
