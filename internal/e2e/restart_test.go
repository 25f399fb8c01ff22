package e2e

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// cutOffBackoff is the backoff of controllers whose clock is fake: the durations do not
// matter, since nothing but the test steps the clock; no jitter keeps it deterministic.
var cutOffBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 100, Cap: 30 * time.Second}

func createConfigMap(t *testing.T, kube kubernetes.Interface, ns, name string, data map[string]string) cm {
	t.Helper()
	obj, err := kube.CoreV1().ConfigMaps(ns).Create(timeout(t), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s/%s: %v", ns, name, err)
	}
	return obj
}

func updateConfigMap(t *testing.T, kube kubernetes.Interface, ns, name string, data map[string]string) cm {
	t.Helper()
	obj, err := kube.CoreV1().ConfigMaps(ns).Get(timeout(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting %s/%s: %v", ns, name, err)
	}
	obj.Data = data
	if obj, err = kube.CoreV1().ConfigMaps(ns).Update(timeout(t), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating %s/%s: %v", ns, name, err)
	}
	return obj
}

func deleteConfigMap(t *testing.T, kube kubernetes.Interface, ns, name string) {
	t.Helper()
	if err := kube.CoreV1().ConfigMaps(ns).Delete(timeout(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting %s/%s: %v", ns, name, err)
	}
}

// offlineChanges is what a test changed while the controller was cut off.
type offlineChanges struct {
	deleted, created, updated []string
	// recreated maps the keys deleted and created again to the UID of the incarnation
	// that was deleted.
	recreated map[string]string
}

// cutOff is the outcome of runCutOff.
type cutOff struct {
	c       *controller.Controller[cm, cmList]
	reqs    *requests[cm, cmList]
	h       *eventcheck.Checker[cm]
	errs    *errorLog
	m       *counters
	holdSeq int // the number of events the handler had seen when the changes began
	// listsAtHold and watchListsAtHold are how many list and watch-list requests the
	// controller had made when the changes began.
	listsAtHold, watchListsAtHold int
	changes                       offlineChanges
}

const offlineNS = "offline"

// runCutOff runs a controller on a fake clock over the ConfigMaps of all namespaces,
// seeded with 40 ConfigMaps cm-00..cm-39 in offlineNS; stops the apiserver and waits
// until the controller has seen its watch fail and waits out its backoff; starts the
// apiserver again and, while the controller still waits, calls change; restarts the
// apiserver; and then lets the controller retry. It returns once the controller has
// converged on the server's state, has stopped, and has passed the checks every test
// ends with.
//
// The restart after change is what makes the relist certain: the new apiserver's watch
// cache begins at a revision after the changes, and kube-apiserver serves every watch
// from a resource version out of that cache, which answers an older version with 410
// Gone. Without it, whether the controller could re-watch would depend on whether the
// apiserver's own shutdown and start-up writes happened to move etcd's revision.
func runCutOff(t *testing.T, change func(cp *testenv.Environment, kube kubernetes.Interface) offlineChanges, opts controller.Options[cm]) cutOff {
	cp := startControlPlane(t)
	admin := newClients(t, cp.AdminConfig())
	createNamespaces(t, admin.kube, offlineNS)
	for i := range 40 {
		createConfigMap(t, admin.kube, offlineNS, fmt.Sprintf("cm-%02d", i), map[string]string{"v": "0"})
	}

	clk := testingclock.NewFakeClock(time.Now())
	r := cutOff{errs: &errorLog{}, m: &counters{}, h: eventcheck.New[cm]("checker")}
	r.reqs = &requests[cm, cmList]{lw: newClients(t, cp.AdminConfig()).kube.CoreV1().ConfigMaps("")}
	// The harness's clock, backoff, error log and counters, with the caller's other options.
	opts.Clock, opts.Backoff, opts.OnError, opts.Metrics = clk, cutOffBackoff, r.errs.handle, r.m
	r.c = testctl.New(t, r.reqs, opts)
	reg := registered(t)(r.c.AddHandler("checker", r.h))
	stop := start(t, r.c)
	waitSynced(t, "the handler", reg.Synced())

	errsBefore := r.errs.count()
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	waitCutOff(t, r.errs, errsBefore, clk)
	if err := cp.StartAPIServer(timeout(t)); err != nil {
		t.Fatal(err)
	}
	r.holdSeq = r.h.Count()
	lists, _, watchLists := r.reqs.snapshot()
	r.listsAtHold, r.watchListsAtHold = len(lists), len(watchLists)
	r.changes = change(cp, admin.kube)
	if err := cp.RestartAPIServer(timeout(t)); err != nil {
		t.Fatal(err)
	}
	if got := r.h.Count(); got != r.holdSeq {
		t.Fatalf("the controller delivered %d events while its clock was stopped", got-r.holdSeq)
	}
	stopPump := pumpClock(t, clk)

	list := listConfigMaps(admin.kube, "")
	converge(t, list, storeView(r.c.Store()), handlerView(r.h))
	stopPump()
	stop()
	assertMatchesServer(t, list, storeView(r.c.Store()), handlerView(r.h))
	r.h.Verify(t)
	r.errs.noHandlerPanics(t)
	lists, watches, watchLists := r.reqs.snapshot()
	t.Logf("the controller replaced its cache %d times with %d list, %d watch and %d watch-list requests; errors: %v",
		r.m.lists.Load(), len(lists), len(watches), len(watchLists), r.errs.all())
	return r
}

// deleteUpdateCreate deletes cm-00..cm-09, updates cm-10..cm-19 and creates
// cm-40..cm-49.
func deleteUpdateCreate(t *testing.T, kube kubernetes.Interface) offlineChanges {
	var ch offlineChanges
	for i := range 10 {
		name := fmt.Sprintf("cm-%02d", i)
		deleteConfigMap(t, kube, offlineNS, name)
		ch.deleted = append(ch.deleted, offlineNS+"/"+name)
	}
	for i := 10; i < 20; i++ {
		name := fmt.Sprintf("cm-%02d", i)
		updateConfigMap(t, kube, offlineNS, name, map[string]string{"v": "1"})
		ch.updated = append(ch.updated, offlineNS+"/"+name)
	}
	for i := 40; i < 50; i++ {
		name := fmt.Sprintf("cm-%02d", i)
		createConfigMap(t, kube, offlineNS, name, map[string]string{"v": "0"})
		ch.created = append(ch.created, offlineNS+"/"+name)
	}
	return ch
}

// assertOfflineChangesDelivered checks that every key deleted while the controller was
// cut off got a deletion (final state unknown allowed), every key created an addition,
// and every key updated a modification to its new state.
func assertOfflineChangesDelivered(t *testing.T, c *controller.Controller[cm, cmList], h *eventcheck.Checker[cm], holdSeq int, changes offlineChanges) {
	t.Helper()
	assertDeletionsDelivered(t, c.Store(), h, changes.deleted, false)
	for _, key := range changes.deleted {
		evs := h.EventsSince(key, holdSeq)
		if len(evs) != 1 || evs[0].Type != event.Deleted {
			t.Errorf("%s deleted while the controller was cut off: got %s, want one deletion", key, describe(evs))
		}
	}
	for _, key := range changes.created {
		evs := h.EventsSince(key, holdSeq)
		if len(evs) == 0 || evs[0].Type != event.Added {
			t.Errorf("%s created while the controller was cut off: got %s, want an addition first", key, describe(evs))
		}
	}
	for _, key := range changes.updated {
		evs := h.EventsSince(key, holdSeq)
		if len(evs) == 0 || evs[len(evs)-1].Type != event.Modified || evs[len(evs)-1].Object.Data["v"] != "1" {
			t.Errorf("%s updated while the controller was cut off: got %s, want a modification to v=1", key, describe(evs))
		}
	}
}

// assertRelistedOnce checks that the controller's watch got 410 Gone after the cut-off
// and that it then replaced its cache exactly once, and that every deletion it delivered
// for a key deleted while it was cut off has a final state unknown: only the relist can
// have told of those deletions.
func assertRelistedOnce(t *testing.T, r cutOff) {
	t.Helper()
	if !r.errs.any(func(err error) bool { return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) }) {
		t.Errorf("the controller reported no 410 Gone / expired error after the cut-off; errors: %v", r.errs.all())
	}
	if got := r.m.lists.Load(); got != 2 {
		t.Errorf("the controller replaced its cache %d times, want 2: the initial list and one relist", got)
	}
	keys := slices.Concat(r.changes.deleted, slices.Sorted(maps.Keys(r.changes.recreated)))
	for _, key := range keys {
		for _, e := range r.h.EventsSince(key, r.holdSeq) {
			if e.Type == event.Deleted && !e.FinalStateUnknown {
				t.Errorf("%s: %v: only a relist can have told of this deletion, so its final state cannot be known", key, e)
			}
		}
	}
}

// TestChangesWhileAPIServerIsDownAreDelivered: the apiserver goes down, comes back, and
// objects are deleted, updated and created before the controller gets to re-watch; the
// apiserver is then restarted, so that its watch cache no longer reaches back to the
// controller's resource version (see runCutOff). The controller must get 410 Gone,
// relist once, and deliver a final-state-unknown deletion for everything that vanished,
// an addition for everything that appeared and a modification for everything changed.
func TestChangesWhileAPIServerIsDownAreDelivered(t *testing.T) {
	checkLeaksAtEnd(t)
	r := runCutOff(t, func(_ *testenv.Environment, kube kubernetes.Interface) offlineChanges {
		return deleteUpdateCreate(t, kube)
	}, controller.Options[cm]{})
	assertOfflineChangesDelivered(t, r.c, r.h, r.holdSeq, r.changes)
	assertRelistedOnce(t, r)
}

// TestRelistAfterCompactionLosesNothing: as above, but etcd's history is also compacted
// before the apiserver restarts, so that the resource version the controller would
// resume from is gone from etcd too, not only from the watch cache; its watch must fail
// with 410 Gone ("too old resource version") and it must relist once, with a consistent
// read, and converge without losing anything; both with a paged list and with a
// watch-list.
func TestRelistAfterCompactionLosesNothing(t *testing.T) {
	tests := []struct {
		name string
		opts controller.Options[cm]
		// check looks at the list and watch-list requests made after the cut-off.
		check func(t *testing.T, lists, watchLists []metav1.ListOptions)
	}{{
		name: "paged list",
		opts: controller.Options[cm]{Options: reflect.Options[cm]{PageSize: 7}},
		check: func(t *testing.T, lists, _ []metav1.ListOptions) {
			// 40 - 10 + 10 ConfigMaps plus a few of kube-system: at least 6 pages.
			if len(lists) < 6 {
				t.Fatalf("relisted with %d list requests, want pages of 7: %+v", len(lists), lists)
			}
			if first := lists[0]; first.ResourceVersion != "" || first.Limit != 7 || first.Continue != "" {
				t.Errorf("the relist began with %+v, want a consistent read (resourceVersion \"\") of 7 items", first)
			}
			for _, next := range lists[1:] {
				if next.Continue == "" {
					t.Errorf("relist page %+v has no continue token", next)
				}
			}
		},
	}, {
		name: "watch-list",
		opts: controller.Options[cm]{Options: reflect.Options[cm]{WatchList: true}},
		check: func(t *testing.T, lists, watchLists []metav1.ListOptions) {
			if len(lists) != 0 {
				t.Errorf("the controller made list requests (%+v) although the server offers watch-list", lists)
			}
			if len(watchLists) != 1 || watchLists[0].ResourceVersion != "" {
				t.Errorf("relisted with watch-lists %+v, want one with resourceVersion \"\"", watchLists)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaksAtEnd(t)
			r := runCutOff(t, func(cp *testenv.Environment, kube kubernetes.Interface) offlineChanges {
				ch := deleteUpdateCreate(t, kube)
				compactedTo, err := cp.CompactEtcd(timeout(t))
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("compacted etcd to revision %d", compactedTo)
				return ch
			}, tt.opts)
			assertOfflineChangesDelivered(t, r.c, r.h, r.holdSeq, r.changes)
			assertRelistedOnce(t, r)
			lists, _, watchLists := r.reqs.snapshot()
			tt.check(t, lists[r.listsAtHold:], watchLists[r.watchListsAtHold:])
		})
	}
}
