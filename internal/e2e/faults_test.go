package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// faultBackoff retries quickly, so that the tests spend their time on faults, not on
// waiting; the jitter is the real thing.
var faultBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 100, Cap: 2 * time.Second}

// TestNothingLostWhenProcessesRestartDuringChurn restarts kube-apiserver or etcd in the
// middle of a churn whose workers retry failed requests. The controller must ride it
// out: re-watch or relist, and end with exactly the server's state, every deletion
// delivered.
func TestNothingLostWhenProcessesRestartDuringChurn(t *testing.T) {
	tests := []struct {
		name  string
		fault func(*testenv.Environment, context.Context) error
	}{
		{name: "kube-apiserver restarts", fault: (*testenv.Environment).RestartAPIServer},
		{name: "etcd restarts", fault: (*testenv.Environment).RestartEtcd},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			namespaces := []string{"fault-a", "fault-b"}
			cp, admin := setUp(t, namespaces...)

			errs, m := &errorLog{}, &counters{}
			c := testctl.New(t, newClients(t, cp.AdminConfig()).kube.CoreV1().ConfigMaps(""), controller.Options[cm]{Options: reflect.Options[cm]{Backoff: faultBackoff, OnError: errs.handle}, Metrics: m})
			h := eventcheck.New[cm]("checker")
			reg := registered(t)(c.AddHandler("checker", h))
			stop := start(t, c)
			waitSynced(t, "the handler", reg.Synced())

			ch := newChurn(t, admin.kube, namespaces, 100, uint64(10+i), true)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			wait := ch.start(ctx, 4, uint64(10+i))
			waitFor(t, "a third of the churn", func() bool { return ch.done.Load() >= int64(ch.total/3) })
			faulted, doneBefore := time.Now(), ch.done.Load()
			if err := tt.fault(cp, timeout(t)); err != nil {
				t.Fatal(err)
			}
			// The restarted apiserver serves requests before it reports ready, so
			// the churn may be over by the time the fault has ended.
			t.Logf("the fault took %v, from operation %d to %d of %d", time.Since(faulted).Round(time.Millisecond),
				doneBefore, ch.done.Load(), ch.total)
			wait()
			if t.Failed() {
				t.FailNow()
			}
			ch.assertServerMatchesModel(t, namespaces...)
			t.Logf("churn: %d operations on %d keys, %d retried requests", ch.total, len(ch.keys), ch.retries.Load())

			list := listConfigMaps(admin.kube, "")
			converge(t, list, storeView(c.Store()), handlerView(h))
			stop()
			assertMatchesServer(t, list, storeView(c.Store()), handlerView(h))
			h.Verify(t)
			errs.noHandlerPanics(t)
			ch.assertDeletionsCarryLastState(t, h, true)
			assertDeletionsDelivered(t, c.Store(), h, ch.gone(), true)
			t.Logf("the controller listed %d times and reported %d errors: %v", m.lists.Load(), errs.count(), errs.all())
			// Not failed here: TestDeletedAndRecreatedWhileCutOffGetTombstoneAndAddition
			// shows this deterministically; a relist during the churn shows it at random.
			if merges := h.IncarnationMerges(); len(merges) > 0 {
				t.Logf("%d re-creations were delivered as modifications (relist across incarnations): %s", len(merges), describe(merges))
			}
		})
	}
}

// TestDeletedAndRecreatedWhileCutOffGetTombstoneAndAddition: the apiserver is stopped
// until the controller has reported its watch failing; once it is back, and before the
// controller gets to re-watch, ConfigMaps are deleted, and others deleted and created
// again under the same name. A handler must see each deletion, and for each
// re-created ConfigMap a deletion of the old incarnation followed by an addition of the
// new one: an object with a new UID is not a modification of the old one. The apiserver
// is restarted after the changes (see runCutOff), so the controller's watch gets 410
// Gone and it relists once, with a list or a watch-list, and the deletions have a final
// state unknown.
func TestDeletedAndRecreatedWhileCutOffGetTombstoneAndAddition(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts controller.Options[cm]
	}{
		{name: "list"},
		{name: "watch-list", opts: controller.Options[cm]{Options: reflect.Options[cm]{WatchList: true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaksAtEnd(t)
			r := runCutOff(t, deleteAndRecreate(t), tt.opts)
			assertTombstonesAndAdditions(t, r)
			assertRelistedOnce(t, r)
		})
	}
}

// deleteAndRecreate deletes cm-00..cm-09, and deletes cm-10..cm-19 and creates them
// again with other data.
func deleteAndRecreate(t *testing.T) func(*testenv.Environment, kubernetes.Interface) offlineChanges {
	return func(_ *testenv.Environment, kube kubernetes.Interface) offlineChanges {
		ch := offlineChanges{recreated: map[string]string{}}
		for i := range 10 {
			name := fmt.Sprintf("cm-%02d", i)
			deleteConfigMap(t, kube, offlineNS, name)
			ch.deleted = append(ch.deleted, offlineNS+"/"+name)
		}
		for i := 10; i < 20; i++ {
			name := fmt.Sprintf("cm-%02d", i)
			old, err := kube.CoreV1().ConfigMaps(offlineNS).Get(timeout(t), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			deleteConfigMap(t, kube, offlineNS, name)
			createConfigMap(t, kube, offlineNS, name, map[string]string{"v": "recreated"})
			ch.recreated[offlineNS+"/"+name] = string(old.UID)
		}
		return ch
	}
}

func assertTombstonesAndAdditions(t *testing.T, r cutOff) {
	t.Helper()
	assertDeletionsDelivered(t, r.c.Store(), r.h, r.changes.deleted, false)
	for _, key := range r.changes.deleted {
		if evs := r.h.EventsSince(key, r.holdSeq); len(evs) != 1 || evs[0].Type != event.Deleted {
			t.Errorf("%s deleted while the controller was cut off: got %s, want one deletion", key, describe(evs))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(r.changes.recreated)) {
		oldUID := r.changes.recreated[key]
		evs := r.h.EventsSince(key, r.holdSeq)
		ok := len(evs) == 2 &&
			evs[0].Type == event.Deleted && string(evs[0].Object.GetUID()) == oldUID &&
			evs[1].Type == event.Added && string(evs[1].Object.GetUID()) != oldUID
		if !ok {
			t.Errorf("%s deleted and re-created while the controller was cut off: got %s, want a deletion of uid %s, then an addition of the new incarnation",
				key, describe(evs), oldUID)
		}
	}
	// Whatever the path (watch or relist), a modification never spans two incarnations
	// (the re-created keys are reported above).
	for _, e := range r.h.IncarnationMerges() {
		if _, ok := r.changes.recreated[offlineNS+"/"+e.Object.GetName()]; ok && e.Object.GetNamespace() == offlineNS {
			continue
		}
		t.Errorf("%v turns uid %s into uid %s: a deletion and an addition were delivered as a modification",
			e, e.Prior.GetUID(), e.Object.GetUID())
	}
}
