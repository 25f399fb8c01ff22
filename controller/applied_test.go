package controller_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/internal/testsupport/watchtap"
	"github.com/typedinformer/typedinformer/reflect"
)

// DESIGN 19: a cache that sees no event past a write catches up only by a bookmark: RequestProgress
// opens a second, short watch from the newest version seen, with bookmarks and a timeout
// short enough that kube-apiserver's watch cache sends one, and its bookmark raises
// Applied. The cache's own watch is never ended, and nothing is listed again.
func TestRequestProgressWatchesBesideTheCachesWatchForABookmarkThatRaisesApplied(t *testing.T) {
	lw := fake.New[obj, list](&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Labels: map[string]string{"app": "web"}}})
	c := testctl.New(t, lw, controller.Options[obj]{Options: selected("app=web")})
	run(t, c)
	testwait.Eventually(t, "the list applied", func() bool { rv, ok := c.Applied(); return ok && rv == 1 }, 10*time.Second)
	// A write the cache's selector leaves out: the server moves on, the watch shows nothing.
	if _, err := lw.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other"}}); err != nil {
		t.Fatal(err)
	}

	c.RequestProgress()
	testwait.Eventually(t, "a second watch", func() bool { return lw.WatchCalls() == 2 }, 10*time.Second)
	probe := lw.Actions()[len(lw.Actions())-1]
	if probe.Options.ResourceVersion != "1" || probe.Options.TimeoutSeconds == nil || *probe.Options.TimeoutSeconds != 3 ||
		!probe.Options.AllowWatchBookmarks || probe.Options.LabelSelector != "app=web" {
		t.Fatalf("the watch for progress: %+v; want one from resource version 1, with bookmarks, a 3 s timeout and the cache's selector", probe.Options)
	}
	testwait.Eventually(t, "Applied at the bookmark", func() bool { rv, ok := c.Applied(); return ok && rv == 2 }, 10*time.Second)
	if n := lw.ListCalls(); n != 1 {
		t.Fatalf("%d lists: asking for progress must not list again", n)
	}
	testwait.Eventually(t, "the second watch ended", func() bool { return lw.Watching() == 1 }, 10*time.Second)
	if n := lw.WatchCalls(); n != 2 {
		t.Fatalf("%d watches: the cache's own watch must go on", n)
	}
}

// DESIGN 19: the second watch may show an event that the cache's own watch, on a slower connection,
// has not yet brought. Its bookmark says nothing is missing up to it only for a cache
// that has that event: Applied stays below the event until the cache's watch brings it,
// and reaches the bookmark then.
func TestAProgressBookmarkWaitsForTheEventsTheCachesOwnWatchHasNotBrought(t *testing.T) {
	lw := fake.New[obj, list](&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Labels: map[string]string{"app": "web"}}})
	slow := &slowFirstWatch{ListerWatcher: lw, release: make(chan struct{})}
	c := testctl.New(t, slow, controller.Options[obj]{Options: selected("app=web")})
	run(t, c)
	testwait.Eventually(t, "the list applied", func() bool { rv, ok := c.Applied(); return ok && rv == 1 }, 10*time.Second)
	if _, err := lw.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", Labels: map[string]string{"app": "web"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := lw.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other"}}); err != nil {
		t.Fatal(err)
	}

	c.RequestProgress() // the second watch shows b (version 2), then a bookmark at 3
	testwait.Eventually(t, "the second watch ended at its bookmark", func() bool { return lw.WatchCalls() == 2 && lw.Watching() == 1 }, 10*time.Second)
	time.Sleep(200 * time.Millisecond) // what the reflector would do with the bookmark at once, it has done
	if rv, _ := c.Applied(); rv != 1 {
		t.Fatalf("Applied is %d before the cache's own watch brought b (version 2): the bookmark must wait for it", rv)
	}
	close(slow.release)
	testwait.Eventually(t, "Applied at the bookmark once b is in", func() bool { rv, ok := c.Applied(); return ok && rv == 3 }, 10*time.Second)
	if _, ok := c.Get("ns/b"); !ok {
		t.Fatal("b is not in the store although Applied passed it")
	}
}

// slowFirstWatch holds back the events of its first watch until release is closed, as a
// congested connection would; later watches pass at once.
type slowFirstWatch struct {
	controller.ListerWatcher[obj, list]
	release chan struct{}
	watches atomic.Int32
}

func (s *slowFirstWatch) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := s.ListerWatcher.Watch(ctx, opts)
	if err != nil || s.watches.Add(1) > 1 {
		return w, err
	}
	return watchtap.Tap(w, func(_ watch.Event, stopped <-chan struct{}) {
		select {
		case <-s.release:
		case <-stopped:
		}
	}), nil
}

// selected returns options with a label selector.
func selected(selector string) reflect.Options[obj] {
	return reflect.Options[obj]{ListOptions: func(o *metav1.ListOptions) { o.LabelSelector = selector }}
}

// DESIGN 19: requests made while the reflector is not watching are each served once it is: asked for
// progress and a relist while it lists, it lists again and opens the watch for progress,
// although it hears of both by one wake-up.
func TestProgressAndARelistAskedForTogetherAreBothServed(t *testing.T) {
	lw := fake.New[obj, list](&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}})
	gated := &secondListWaits{ListerWatcher: lw, entered: make(chan struct{}), release: make(chan struct{})}
	c := testctl.New(t, gated, controller.Options[obj]{})
	run(t, c)
	testwait.Eventually(t, "the list applied", func() bool { rv, ok := c.Applied(); return ok && rv == 1 }, 10*time.Second)
	c.RequestRelist()
	<-gated.entered // the second list waits: no watch loop runs
	c.RequestProgress()
	c.RequestRelist()
	close(gated.release)
	// Each list is followed by the cache's own watch; a watch more is one for progress.
	served := func() (lists, probes int) {
		for _, a := range lw.Actions() {
			switch a.Verb {
			case fake.VerbList:
				lists++
			case fake.VerbWatch:
				probes++
			}
		}
		return lists, probes - lists
	}
	testwait.Eventually(t, "a third list and a watch for progress", func() bool { l, p := served(); return l == 3 && p >= 1 }, 10*time.Second)
}

// secondListWaits makes its second List wait until release is closed, saying so on
// entered.
type secondListWaits struct {
	controller.ListerWatcher[obj, list]
	entered, release chan struct{}
	lists            atomic.Int32
}

func (s *secondListWaits) List(ctx context.Context, opts metav1.ListOptions) (list, error) {
	if s.lists.Add(1) == 2 {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.ListerWatcher.List(ctx, opts)
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
