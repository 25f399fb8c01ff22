package e2e

// typed/manager on a real kube-apiserver: loops sharing one watch, readiness following
// the caches' sync, a graceful shutdown with a reconcile in flight, and a cache whose CRD
// is deleted and installed again.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// keyLog records the keys a reconciler saw.
type keyLog struct {
	mu   sync.Mutex
	keys map[string]bool
}

func (l *keyLog) reconciler() typed.ReconcilerFunc[cm] {
	return func(_ context.Context, req typed.Request[cm]) (typed.Result, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.keys == nil {
			l.keys = map[string]bool{}
		}
		l.keys[req.Key] = true
		return typed.Result{}, nil
	}
}

func (l *keyLog) seen() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]bool{}
	for k := range l.keys {
		out[k] = true
	}
	return out
}

// Two loops over the same ConfigMaps, each acquiring its cache, cost the server one list
// and one watch.
func TestManagerLoopsShareOneWatch(t *testing.T) {
	const ns = "manager-share"
	_, admin := setUp(t, ns)
	for i := range 3 {
		createConfigMap(t, admin.kube, ns, fmt.Sprintf("cm-%d", i), nil)
	}
	before, err := serverWatchesOf(timeout(t), admin.kube, "configmaps")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ConfigMap watches on the server before the manager runs: %d", before)

	recorded := &requests[cm, cmList]{lw: admin.kube.CoreV1().ConfigMaps(ns)}
	src := manager.Namespaced[cm](func(string) *requests[cm, cmList] { return recorded })
	m := manager.New(manager.Options{})
	logs := map[string]*keyLog{"first": {}, "second": {}}
	for name, log := range logs {
		c, err := manager.Acquire(m, src, manager.CacheOptions[cm]{Namespaces: []string{ns}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		if _, err := manager.NewLoop(c, log.reconciler(), typed.Options{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	start(t, m)
	want := map[string]bool{ns + "/cm-0": true, ns + "/cm-1": true, ns + "/cm-2": true}
	waitUntil(t, "both loops to reconcile every ConfigMap", func() (bool, string) {
		got := map[string]map[string]bool{"first": logs["first"].seen(), "second": logs["second"].seen()}
		diff := cmp.Diff(map[string]map[string]bool{"first": want, "second": want}, got)
		return diff == "", diff
	})
	waitUntil(t, "the server to serve the manager's watch", func() (bool, string) {
		n, err := serverWatchesOf(timeout(t), admin.kube, "configmaps")
		return err == nil && n == before+1, fmt.Sprintf("%d watches (%v), want %d", n, err, before+1)
	})
	lists, watches, watchLists := recorded.snapshot()
	// Each loop's fence (DESIGN 19) reads one object for the server's resource version,
	// and may ask the cache for a bookmark with a short watch: neither is the cache's.
	lists = slices.DeleteFunc(lists, func(o metav1.ListOptions) bool { return o.Limit == 1 })
	watches = slices.DeleteFunc(watches, func(o metav1.ListOptions) bool { return o.TimeoutSeconds != nil && *o.TimeoutSeconds <= 3 })
	// A cache lists with a watch-list by default, and watches on with it.
	if len(lists)+len(watchLists) != 1 || len(watches)+len(watchLists) != 1 {
		t.Errorf("the manager listed %d times, watched %d times and watch-listed %d times, want one list and one watch (or one watch-list) for two loops", len(lists), len(watches), len(watchLists))
	}
}

// /readyz fails while a loop's cache cannot sync (its user may not list ConfigMaps yet),
// and passes once it can and has.
func TestManagerReadinessFollowsTheCachesSync(t *testing.T) {
	const ns = "manager-ready"
	cp, admin := setUp(t, ns)
	createConfigMap(t, admin.kube, ns, "settings", nil)
	bob := newClients(t, cp.UserConfig("bob"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := manager.New(manager.Options{HealthProbeListener: l})
	c, err := manager.Acquire(m, manager.Namespaced[cm](bob.kube.CoreV1().ConfigMaps), manager.CacheOptions[cm]{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if _, err := manager.NewLoop(c, (&keyLog{}).reconciler(), typed.Options{Name: "settings"}); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	readyz := func() (int, string) {
		resp, err := client.Get("http://" + l.Addr().String() + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		return resp.StatusCode, b.String()
	}
	start(t, m)
	if code, body := readyz(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while bob may not list ConfigMaps = %d:\n%s\nwant 503", code, body)
	}
	grantConfigMapReader(t, admin.kube, bob.kube, ns, "bob")
	waitUntil(t, "/readyz to pass once the cache has synced", func() (bool, string) {
		code, body := readyz()
		return code == http.StatusOK, body
	})
	if !c.HasSynced() {
		t.Error("/readyz passed before the loop's cache synced")
	}
}

// Shutting down with a reconcile in flight lets it finish, reading the cache and writing
// to the server, before the caches stop; then nothing is left running.
func TestManagerShutdownWithAReconcileInFlight(t *testing.T) {
	const ns = "manager-shutdown"
	_, admin := setUp(t, ns)
	createConfigMap(t, admin.kube, ns, "settings", nil)
	m := manager.New(manager.Options{})
	c, err := manager.Acquire(m, manager.Namespaced[cm](admin.kube.CoreV1().ConfigMaps), manager.CacheOptions[cm]{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	inFlight := make(chan struct{})
	var finished error
	if _, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](func(ctx context.Context, req typed.Request[cm]) (typed.Result, error) {
		close(inFlight)
		<-ctx.Done() // the shutdown has begun; finishing the work needs a context of its own
		cached, ok := c.Get(req.Key)
		if !ok {
			finished = fmt.Errorf("%s is no longer cached", req.Key)
			return typed.Result{}, finished
		}
		update := cached.DeepCopy()
		update.Annotations = map[string]string{"reconciled": "yes"}
		_, finished = admin.kube.CoreV1().ConfigMaps(ns).Update(context.WithoutCancel(ctx), update, metav1.UpdateOptions{})
		return typed.Result{}, finished
	}), typed.Options{Name: "settings"}); err != nil {
		t.Fatal(err)
	}
	stop := start(t, m)
	receive(t, inFlight, "a reconcile is in flight")
	stop() // checks that Run returned nil and left no goroutine
	if finished != nil {
		t.Fatalf("the in-flight reconcile could not finish: %v", finished)
	}
	got, err := admin.kube.CoreV1().ConfigMaps(ns).Get(timeout(t), "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"reconciled": "yes"}, got.Annotations); diff != "" {
		t.Errorf("the write of the in-flight reconcile (-want +got):\n%s", diff)
	}
}

// crdClient returns the CustomResourceDefinitions client of cfg, over connections of its
// own that are closed when the test ends (see newClients).
func crdClient(t *testing.T, cfg *rest.Config) manager.CRDClient {
	t.Helper()
	return extensionsClient(t, cfg).ApiextensionsV1().CustomResourceDefinitions()
}

// A loop runs over a cache of Widgets while their CRD is deleted, twice: the cache stops
// with ErrResourceNotServed instead of retrying, /readyz says why, and once the CRD is
// installed again the cache resumes (told by the CRD's watch: its own checks are too slow
// to come within the test), its handler gets the new Widgets as additions and the loop
// reconciles them; nothing is left running at the end.
func TestManagerCacheOfADeletedCRDStopsAndResumes(t *testing.T) {
	const ns = "manager-crd"
	cp, admin := setUp(t, ns)
	installWidgetCRD(t, admin.dyn)
	createWidget := func(name string) {
		t.Helper()
		if _, err := admin.dyn.Resource(widgetGVR).Namespace(ns).Create(timeout(t), widget(ns, name, map[string]any{"size": 1}), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating widget %s: %v", name, err)
		}
	}
	createWidget("before")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := manager.New(manager.Options{
		HealthProbeListener:       l,
		CustomResourceDefinitions: crdClient(t, cp.AdminConfig()),
		ResourceBackoff:           wait.Backoff{Duration: time.Hour},
	})
	c, err := manager.Acquire(m, manager.Dynamic(admin.dyn, widgetGVR, false), manager.CacheOptions[u]{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	events := &eventcheck.Types[u]{}
	if _, err := c.AddHandler("events", events); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reconciled := map[string]int{}
	if _, err := manager.NewLoop(c, typed.ReconcilerFunc[u](func(_ context.Context, req typed.Request[u]) (typed.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if !req.Deleted {
			reconciled[req.Key]++
		}
		return typed.Result{}, nil
	}), typed.Options{Name: "widgets"}); err != nil {
		t.Fatal(err)
	}
	wasReconciled := func(key string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return reconciled[key] > 0
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	readyz := func() (int, string) {
		resp, err := client.Get("http://" + l.Addr().String() + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		return resp.StatusCode, b.String()
	}

	stop := start(t, m)
	waitFor(t, "the loop to reconcile the widget made before", wasReconciled(ns+"/before"))
	crdName := widgetGVR.Resource + "." + widgetGVR.Group
	for round := range 2 {
		if err := admin.dyn.Resource(crdGVR).Delete(timeout(t), crdName, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("round %d: deleting the CRD: %v", round, err)
		}
		waitUntil(t, "the cache to stop with ErrResourceNotServed", func() (bool, string) {
			return errors.Is(c.Err(), manager.ErrResourceNotServed), fmt.Sprint(c.Err())
		})
		if !strings.Contains(c.Err().Error(), widgetGVR.String()) {
			t.Errorf("round %d: Err = %v, which does not name %s", round, c.Err(), widgetGVR)
		}
		if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "resource not served") {
			t.Errorf("round %d: /readyz while the CRD is gone = %d:\n%s\nwant 503, saying the resource is not served", round, code, body)
		}
		if c.HasSynced() {
			t.Errorf("round %d: the cache says it is synced while its CRD is gone", round)
		}
		waitFor(t, "the CRD to be gone", func() bool {
			_, err := admin.dyn.Resource(crdGVR).Get(timeout(t), crdName, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})

		installWidgetCRD(t, admin.dyn)
		name := fmt.Sprint("after-", round)
		createWidget(name)
		waitUntil(t, "/readyz to pass once the cache has resumed", func() (bool, string) {
			code, body := readyz()
			return code == http.StatusOK, body
		})
		if err := c.Err(); err != nil || !c.HasSynced() {
			t.Errorf("round %d: once resumed, Err = %v and HasSynced = %v; want nil and true", round, err, c.HasSynced())
		}
		waitFor(t, "the loop to reconcile "+name, wasReconciled(ns+"/"+name))
	}
	want := map[string][]string{
		ns + "/before":  {"ADDED", "DELETED"},
		ns + "/after-0": {"ADDED", "DELETED"},
		ns + "/after-1": {"ADDED"},
	}
	waitUntil(t, "the handler to see every widget come and go", func() (bool, string) {
		diff := cmp.Diff(want, events.ByKey())
		return diff == "", diff
	})
	stop() // checks that Run returned nil and left no goroutine
}

// Keys from outside the cluster reach a loop over ConfigMaps on the server: a channel's
// key is reconciled with the object read from the cache, and a reconcile enqueues another
// key through its context.
func TestManagerReconcilesKeysFromOutsideTheCluster(t *testing.T) {
	const ns = "manager-triggers"
	_, admin := setUp(t, ns)
	createConfigMap(t, admin.kube, ns, "settings", nil)
	createConfigMap(t, admin.kube, ns, "derived", nil)
	m := manager.New(manager.Options{})
	c, err := manager.Acquire(m, manager.Namespaced[cm](admin.kube.CoreV1().ConfigMaps), manager.CacheOptions[cm]{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	var mu sync.Mutex
	var seen []string
	loop, err := manager.NewLoop(c, typed.ReconcilerFunc[cm](func(ctx context.Context, req typed.Request[cm]) (typed.Result, error) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s cached=%v", req.Key, !req.Deleted))
		mu.Unlock()
		if req.Key == ns+"/from-webhook" {
			return typed.Result{}, manager.Enqueue(ctx, ns+"/derived")
		}
		return typed.Result{}, nil
	}), typed.Options{Name: "settings", Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	keys := make(chan string)
	if err := loop.AddTrigger("webhook", manager.Channel(keys)); err != nil {
		t.Fatal(err)
	}
	stop := start(t, m)
	count := func(entry string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range seen {
			if s == entry {
				n++
			}
		}
		return n
	}
	waitFor(t, "the initial reconciles", func() bool {
		return count(ns+"/settings cached=true") == 1 && count(ns+"/derived cached=true") == 1
	})
	keys <- ns + "/settings"
	keys <- ns + "/from-webhook"
	waitUntil(t, "the keys from the channel, and the one a reconcile enqueued", func() (bool, string) {
		done := count(ns+"/settings cached=true") == 2 && count(ns+"/from-webhook cached=false") == 1 &&
			count(ns+"/derived cached=true") == 2
		mu.Lock()
		defer mu.Unlock()
		return done, fmt.Sprint(seen)
	})
	stop()
}
