package e2e

import (
	"fmt"
	"testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

// TestWatchListSyncsWithoutAListAndFollowsChanges: with watch-list on, the controller
// gets the initial state of 50 ConfigMaps from one streaming watch, makes no List call
// at all, and then follows a change made after it synced.
func TestWatchListSyncsWithoutAListAndFollowsChanges(t *testing.T) {
	const ns = "watch-list"
	cp, admin := setUp(t, ns)
	for i := range 50 {
		createConfigMap(t, admin.kube, ns, fmt.Sprintf("cm-%02d", i), nil)
	}

	reqs := &requests[cm, cmList]{lw: newClients(t, cp.AdminConfig()).kube.CoreV1().ConfigMaps(ns)}
	errs := &errorLog{}
	c := testctl.New(t, reqs, controller.Options[cm]{Options: reflect.Options[cm]{WatchList: true, OnError: errs.handle}})
	h := eventcheck.New[cm]("checker")
	reg := registered(t)(c.AddHandler("checker", h))
	stop := start(t, c)
	waitSynced(t, "the handler", reg.Synced())
	if got := len(c.Store().InNamespace(ns)); got != 50 {
		t.Errorf("synced with %d ConfigMaps, want 50", got)
	}
	createConfigMap(t, admin.kube, ns, "late", nil)

	list := listConfigMaps(admin.kube, ns)
	converge(t, list, storeView(c.Store()), handlerView(h))
	stop()
	assertMatchesServer(t, list, storeView(c.Store()), handlerView(h))
	h.Verify(t)
	if all := errs.all(); len(all) != 0 {
		t.Errorf("the controller reported errors without any fault: %v", all)
	}
	lists, _, watchLists := reqs.snapshot()
	if len(lists) != 0 || len(watchLists) != 1 {
		t.Errorf("made %d list and %d watch-list requests, want none and one: the initial state comes through the watch-list stream",
			len(lists), len(watchLists))
	}
}
