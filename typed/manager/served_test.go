package manager_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

type (
	crd     = *apiextensionsv1.CustomResourceDefinition
	crdList = *apiextensionsv1.CustomResourceDefinitionList
)

// widgets is the custom resource the tests' ConfigMaps stand in for.
var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// A backoff that never comes within a test: the cache can only learn from the CRD.
var never = wait.Backoff{Duration: time.Hour}

// Checks every few milliseconds: the cache learns soon without a CRD.
var often = wait.Backoff{Duration: 5 * time.Millisecond, Factor: 1}

func widgetCRD() crd {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: widgets.Resource + "." + widgets.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: widgets.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: widgets.Resource, Kind: "Widget"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1alpha1", Served: false},
				{Name: widgets.Version, Served: true, Storage: true},
			},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
			{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
		}},
	}
}

// resource is a server's custom resource, in fakes: objects (ConfigMaps stand in for
// widgets) and its CustomResourceDefinition. remove does what the API server does when
// the CRD is deleted: the objects are deleted (watches see the deletions), the watches
// end, and every list and watch is then answered 404 Not Found; install serves it again.
type resource struct {
	t    *testing.T
	objs *cmFake
	crds *fake.ListerWatcher[crd, crdList]
}

func newResource(t *testing.T, objs ...cm) *resource {
	r := &resource{t: t, objs: fake.New[cm, cmList](objs...), crds: fake.New[crd, crdList]()}
	r.installCRD()
	return r
}

// source is the Source of the resource's objects, naming its GroupVersionResource.
func (r *resource) source() manager.Source[cm, cmList] {
	src := source(r.objs)
	src.GroupVersionResource = widgets
	return src
}

func (r *resource) remove() {
	r.t.Helper()
	list, err := r.objs.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, obj := range list.Items {
		if _, err := r.objs.Delete(obj.Namespace, obj.Name); err != nil {
			r.t.Fatal(err)
		}
	}
	r.serve(false)
	r.objs.CloseWatches()
	if _, err := r.crds.Delete("", widgets.Resource+"."+widgets.Group); err != nil {
		r.t.Fatal(err)
	}
}

// serve makes the server answer lists and watches of the objects, or 404 Not Found.
func (r *resource) serve(served bool) {
	if served {
		r.objs.FailList(0, nil)
		r.objs.FailWatch(0, nil)
		return
	}
	notFound := apierrors.NewNotFound(widgets.GroupResource(), "")
	r.objs.FailList(math.MaxInt, notFound)
	r.objs.FailWatch(math.MaxInt, notFound)
}

func (r *resource) installCRD() {
	r.t.Helper()
	if _, err := r.crds.Create(widgetCRD()); err != nil {
		r.t.Fatal(err)
	}
}

func (r *resource) install() {
	r.t.Helper()
	r.serve(true)
	r.installCRD()
}

// requests counts the lists and watches that reached the objects' server.
func (r *resource) requests() int { return r.objs.ListCalls() + r.objs.WatchCalls() }

// outages returns the messages of the errors logged for resources not served.
func outages(logs ktesting.Buffer) []string {
	var out []string
	for _, entry := range logs.Data() {
		if entry.Type == ktesting.LogError {
			if !errors.Is(entry.Err, manager.ErrResourceNotServed) {
				continue
			}
			out = append(out, entry.Message)
		}
	}
	return out
}

const outageMessage = "The server does not serve the resource: the cache stops until it is served again"

// wantNotServed checks what a cache says while its resource is not served: Err,
// HasSynced, WaitForSync and, when a Loop needs the cache, /readyz.
func wantNotServed(t *testing.T, m *manager.Manager, c *manager.Cache[cm]) {
	t.Helper()
	eventually(t, "the cache to report its resource not served", func() bool { return c.Err() != nil })
	ended, cancel := context.WithCancel(testContext(t))
	cancel()
	waitErr := c.WaitForSync(ended)
	readyz := get(m.ReadyzHandler(), "/readyz")
	needed := strings.Contains(readyz.Body, "loop ")
	type view struct {
		ErrIsNotServed, ErrNamesCache, HasSynced bool
		WaitForSyncIsCanceledAndNotServed        bool
		ReadyzCode                               int
		ReadyzSaysWhy                            bool
	}
	got := view{
		ErrIsNotServed:                    errors.Is(c.Err(), manager.ErrResourceNotServed),
		ErrNamesCache:                     strings.Contains(c.Err().Error(), c.Name()),
		HasSynced:                         c.HasSynced(),
		WaitForSyncIsCanceledAndNotServed: errors.Is(waitErr, context.Canceled) && errors.Is(waitErr, manager.ErrResourceNotServed),
		ReadyzCode:                        readyz.Code,
		ReadyzSaysWhy:                     strings.Contains(readyz.Body, "resource not served"),
	}
	want := view{ErrIsNotServed: true, ErrNamesCache: true, WaitForSyncIsCanceledAndNotServed: true, ReadyzCode: 200}
	if needed {
		want.ReadyzCode, want.ReadyzSaysWhy = 503, true
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the cache while its resource is not served (-want +got):\n%s\nErr: %v\nWaitForSync: %v\n/readyz: %s", diff, c.Err(), waitErr, readyz.Body)
	}
}

// wantServed waits for the cache to sync again, and checks that it says so everywhere.
func wantServed(t *testing.T, m *manager.Manager, c *manager.Cache[cm]) {
	t.Helper()
	if err := c.WaitForSync(testContext(t)); err != nil {
		t.Fatalf("WaitForSync once the resource is served again: %v", err)
	}
	if err, readyz := c.Err(), get(m.ReadyzHandler(), "/readyz"); err != nil || !c.HasSynced() || readyz.Code != 200 { // a Loop needs c, or nothing
		t.Errorf("once served again and synced: Err = %v, HasSynced = %v, /readyz = %d %s; want nil, true, 200", err, c.HasSynced(), readyz.Code, readyz.Body)
	}
}

// A cache whose custom resource is deleted stops with one clear error instead of
// retrying, says why it is not synced, and resumes once the resource is served again:
// its handlers and loops, untouched, get the objects listed then as additions, and live
// changes after. It learns that the resource is back from its CustomResourceDefinition
// when it can, and by checking on a backoff otherwise. It resumes with a watch-list (the
// default) and with a paged list (NoWatchList).
func TestACacheWhoseResourceIsRemovedStopsThenResumesWhenItIsServedAgain(t *testing.T) {
	for _, paged := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoWatchList=%v", paged), func(t *testing.T) { testRemovedThenResumed(t, paged) })
	}
}

func testRemovedThenResumed(t *testing.T, paged bool) {
	for _, tc := range []struct {
		name string
		opts func(r *resource) manager.Options
		// gvr: whether the Source names its GroupVersionResource.
		gvr bool
		// quiet: whether the cache must make no request to the resource while it waits.
		quiet bool
	}{{
		name: "watching the CustomResourceDefinition",
		opts: func(r *resource) manager.Options {
			return manager.Options{CustomResourceDefinitions: r.crds, ResourceBackoff: never}
		},
		gvr:   true,
		quiet: true,
	}, {
		name: "without a CRD client, checking on a backoff",
		opts: func(*resource) manager.Options { return manager.Options{ResourceBackoff: often} },
		gvr:  true,
	}, {
		name: "for a Source without a GroupVersionResource, checking on a backoff",
		opts: func(r *resource) manager.Options {
			return manager.Options{CustomResourceDefinitions: r.crds, ResourceBackoff: often}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResource(t, configMap("a", "one", nil), configMap("a", "two", nil))
			ctx, logs := loggedContext(t)
			opts := tc.opts(r)
			opts.NoWatchList = paged
			m := manager.New(opts)
			src := r.source()
			if !tc.gvr {
				src.GroupVersionResource = schema.GroupVersionResource{}
			}
			c := acquire(t, m, src)
			defer c.Release()
			events := &eventcheck.Types[cm]{}
			reg, err := c.AddHandler("events", events)
			if err != nil {
				t.Fatal(err)
			}
			reconciled := newReconciles()
			if _, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](reconciled.reconcile), typed.Options{Name: "widgets"}); err != nil {
				t.Fatal(err)
			}
			runIn(t, ctx, m)
			if err := c.WaitForSync(testContext(t)); err != nil {
				t.Fatal(err)
			}
			receive(t, reconciled.ch, "a reconcile at start")
			receive(t, reconciled.ch, "the other reconcile at start")
			// Synced means listed: the deletions reach the cache through its watch, which
			// must be open before remove() makes the resource not served.
			if err := r.objs.WaitForWatchers(testContext(t), 1); err != nil {
				t.Fatal(err)
			}
			// The handler must have handled the additions: a deletion reaching its backlog
			// while the addition is pending there cancels it (the handler never knew the
			// object), and it would hear of neither.
			if err := reg.WaitForSync(testContext(t)); err != nil {
				t.Fatal(err)
			}

			r.remove()
			wantNotServed(t, m, c)
			if err := c.Err(); tc.gvr && !strings.Contains(err.Error(), widgets.String()) {
				t.Errorf("Err = %v, which does not name the resource %s", err, widgets)
			}
			for range 2 {
				receive(t, reconciled.ch, "the reconcile of a deletion")
			}
			if tc.quiet {
				before := r.requests()
				time.Sleep(100 * time.Millisecond) // nothing is due; a slow machine only waits longer
				if after := r.requests(); after != before {
					t.Errorf("the cache made %d requests to the resource while waiting for its CRD, want none", after-before)
				}
			}
			_ = must(r.objs.Create(configMap("a", "three", nil))) // in the server's store, not yet served
			r.install()
			wantServed(t, m, c)
			if key := receive(t, reconciled.ch, "the reconcile of an object listed on resumption"); key != "a/three" {
				t.Errorf("reconciled %s, want a/three", key)
			}
			_ = must(r.objs.Create(configMap("a", "four", nil)))
			if key := receive(t, reconciled.ch, "the reconcile of a live change after resumption"); key != "a/four" {
				t.Errorf("reconciled %s, want a/four", key)
			}
			want := map[string][]string{
				"a/one":   {"ADDED", "DELETED"},
				"a/two":   {"ADDED", "DELETED"},
				"a/three": {"ADDED"},
				"a/four":  {"ADDED"},
			}
			eventually(t, "the handler to get a/four", func() bool { return len(events.ByKey()["a/four"]) > 0 })
			if diff := cmp.Diff(want, events.ByKey()); diff != "" {
				t.Errorf("events the cache's handler got, by key (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"a/four", "a/three"}, keys(c.List())); diff != "" {
				t.Errorf("the cache after resumption (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{outageMessage}, outages(logs)); diff != "" {
				t.Errorf("errors logged for the outage (-want +got):\n%s", diff)
			}
		})
	}
}

// The guarantees hold however the outage comes and goes: before the first list, twice
// over, and when the CRD is established a moment before its resource is served.
func TestResourceOutagesComeAndGo(t *testing.T) {
	for _, tc := range []struct {
		name string
		// outage runs once the manager runs with the cache acquired and, unless
		// notSyncedFirst, synced; it ends with the resource served and synced again.
		outage         func(t *testing.T, r *resource, m *manager.Manager, c *manager.Cache[cm])
		notSyncedFirst bool
		wantErrors     int
		want           []string
	}{{
		name:           "the resource is not served yet at the first list",
		notSyncedFirst: true,
		outage: func(t *testing.T, r *resource, m *manager.Manager, c *manager.Cache[cm]) {
			wantNotServed(t, m, c)
			r.install()
			wantServed(t, m, c)
		},
		wantErrors: 1,
		want:       []string{"a/one"},
	}, {
		name: "deleted and installed twice",
		outage: func(t *testing.T, r *resource, m *manager.Manager, c *manager.Cache[cm]) {
			for i := range 2 {
				r.remove()
				wantNotServed(t, m, c)
				_ = must(r.objs.Create(configMap("a", fmt.Sprint("after-", i), nil)))
				r.install()
				wantServed(t, m, c)
			}
		},
		wantErrors: 2,
		want:       []string{"a/after-1"},
	}, {
		name: "the CRD is established before its resource is served",
		outage: func(t *testing.T, r *resource, m *manager.Manager, c *manager.Cache[cm]) {
			r.remove()
			wantNotServed(t, m, c)
			before := r.requests()
			r.installCRD()
			eventually(t, "the cache to check the resource, told by the CRD", func() bool { return r.requests() > before })
			if !errors.Is(c.Err(), manager.ErrResourceNotServed) || c.HasSynced() {
				t.Errorf("the resource still answers 404, yet Err = %v and HasSynced = %v", c.Err(), c.HasSynced())
			}
			_ = must(r.objs.Create(configMap("a", "back", nil)))
			r.serve(true)
			wantServed(t, m, c)
		},
		wantErrors: 1,
		want:       []string{"a/back"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResource(t, configMap("a", "one", nil))
			if tc.notSyncedFirst {
				r.remove()
				_ = must(r.objs.Create(configMap("a", "one", nil)))
			}
			ctx, logs := loggedContext(t)
			m := manager.New(manager.Options{CustomResourceDefinitions: r.crds, ResourceBackoff: never})
			c := acquire(t, m, r.source())
			defer c.Release()
			if _, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](newReconciles().reconcile), typed.Options{Name: "widgets"}); err != nil {
				t.Fatal(err)
			}
			runIn(t, ctx, m)
			if !tc.notSyncedFirst {
				wantServed(t, m, c)
			}
			tc.outage(t, r, m, c)
			// Synced again means the relist is in the cache's queue: its objects follow.
			eventually(t, fmt.Sprintf("the cache to hold %q", tc.want), func() bool { return cmp.Equal(tc.want, keys(c.List())) })
			if got := len(outages(logs)); got != tc.wantErrors {
				t.Errorf("%d outages logged at error level, want %d: %q", got, tc.wantErrors, outages(logs))
			}
		})
	}
}

// A cache waiting for its resource to be served again stops, leaving no goroutine, when
// its last handle is released or the Manager stops.
func TestACacheWaitingForItsResourceStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, r *running, c *manager.Cache[cm])
	}{{
		name: "its last handle released",
		stop: func(t *testing.T, _ *running, c *manager.Cache[cm]) {
			receive(t, c.Release(), "the released cache stops")
		},
	}, {
		name: "the manager stopped",
		stop: func(t *testing.T, r *running, _ *manager.Cache[cm]) {
			if err := r.stop(t); err != nil {
				t.Errorf("Run = %v", err)
			}
		},
	}} {
		for _, crds := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, watching the CRD %v", tc.name, crds), func(t *testing.T) {
				r := newResource(t, configMap("a", "one", nil))
				opts := manager.Options{ResourceBackoff: often}
				if crds {
					opts = manager.Options{CustomResourceDefinitions: r.crds, ResourceBackoff: never}
				}
				m := manager.New(opts)
				running := run(t, m)
				managerOnly := goleak.IgnoreCurrent()
				c := acquire(t, m, r.source())
				defer c.Release()
				if err := c.WaitForSync(testContext(t)); err != nil {
					t.Fatal(err)
				}
				r.remove()
				wantNotServed(t, m, c)
				if crds {
					eventually(t, "the cache to watch the CRD", func() bool { return r.crds.Watching() == 1 })
				}
				tc.stop(t, running, c)
				if n := r.crds.Watching(); n != 0 {
					t.Errorf("%d watches of CRDs open once the cache stopped, want 0", n)
				}
				goleak.VerifyNone(t, managerOnly)
			})
		}
	}
}

// Acquire calls during an outage share the cache that waits, or wait themselves, and
// all resume together.
func TestConcurrentAcquiresDuringAnOutage(t *testing.T) {
	r := newResource(t, configMap("a", "one", nil), configMap("b", "two", nil))
	m := manager.New(manager.Options{CustomResourceDefinitions: r.crds, ResourceBackoff: never})
	run(t, m)
	first := acquire(t, m, r.source(), manager.CacheOptions[cm]{Namespaces: []string{"a"}})
	defer first.Release()
	if err := first.WaitForSync(testContext(t)); err != nil {
		t.Fatal(err)
	}
	r.remove()
	wantNotServed(t, m, first)
	lists := r.objs.ListCalls()

	const acquirers = 10
	handles := make([]*manager.Cache[cm], acquirers)
	errs := make([]error, acquirers)
	var wg sync.WaitGroup
	for i := range acquirers {
		scope := []string{"a"}
		if i%2 == 1 {
			scope = []string{"a", "b"} // b is a cache of its own, which finds the resource not served
		}
		wg.Go(func() {
			handles[i], errs[i] = manager.Acquire(m, r.source(), manager.CacheOptions[cm]{Namespaces: scope, Indexers: byLabel(fmt.Sprint(i))})
		})
	}
	wg.Wait()
	for i, h := range handles {
		if errs[i] != nil {
			t.Fatalf("Acquire %d during the outage: %v", i, errs[i])
		}
		defer h.Release()
		if h.HasSynced() {
			t.Errorf("handle %d (%s) is synced during the outage", i, h.Name())
		}
	}
	eventually(t, "every handle to report the outage", func() bool {
		for _, h := range handles {
			if !errors.Is(h.Err(), manager.ErrResourceNotServed) {
				return false
			}
		}
		return true
	})
	// Namespace b's cache may list once, or learn of the outage before it does; the shared
	// cache of a never lists again.
	if n := r.objs.ListCalls() - lists; n > 1 {
		t.Errorf("%d lists during the outage, want at most 1: namespace b's first, none for the shared cache of a", n)
	}
	_ = must(r.objs.Create(configMap("b", "three", nil)))
	r.install()
	for i, h := range handles {
		if err := h.WaitForSync(testContext(t)); err != nil {
			t.Fatalf("handle %d: %v", i, err)
		}
	}
	eventually(t, "the cache of a and b to hold b/three", func() bool { return cmp.Equal([]string{"b/three"}, keys(handles[1].List())) })
}
