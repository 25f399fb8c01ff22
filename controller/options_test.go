package controller_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

// optionsRun is what a row of TestOptionsTakeEffect builds its Options from and checks.
type optionsRun struct {
	src     *fake.ListerWatcher[obj, list]
	metrics *countingMetrics
	errorLog
}

// firstErrorPrefix checks that the first error reported starts with prefix: the name
// the controller gives its errors.
func (r *optionsRun) firstErrorPrefix(t *testing.T, prefix string) {
	t.Helper()
	errs := r.errors()
	if len(errs) == 0 {
		t.Fatal("the error handler received no error")
	}
	if !strings.HasPrefix(errs[0].Error(), prefix) {
		t.Errorf("the first error is %q, want it to begin with %q", errs[0], prefix)
	}
}

func (r *optionsRun) lists() []metav1.ListOptions {
	var out []metav1.ListOptions
	for _, a := range r.src.Actions() {
		if a.Verb == fake.VerbList {
			out = append(out, a.Options)
		}
	}
	return out
}

func keys(c *controller.Controller[obj, list]) []string {
	out := c.Store().Keys()
	sort.Strings(out)
	return out
}

func byIndex(t *testing.T, c *controller.Controller[obj, list], index, value string) []string {
	t.Helper()
	objs, err := c.Store().ByIndex(index, value)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Namespace+"/"+o.Name)
	}
	sort.Strings(out)
	return out
}

// Each row builds a controller over the same three ConfigMaps with its Options, runs it until it has synced, and checks one effect.
// Resync, Clock and FullHistory, which need events after the sync, have tests of their
// own below.
func TestOptionsTakeEffect(t *testing.T) {
	fast := wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 20}
	web := func(o obj) ([]string, error) { return []string{o.Labels["app"]}, nil }
	prefixed := func(prefix string) event.KeyFunc[obj] {
		return func(o obj) (string, error) { return prefix + o.Name, nil }
	}
	tests := []struct {
		name string
		// failLists makes the first list fail, so that an error is reported.
		failLists bool
		opts      func(r *optionsRun) controller.Options[obj]
		check     func(t *testing.T, r *optionsRun, c *controller.Controller[obj, list])
	}{{
		name: "none",
		opts: func(*optionsRun) controller.Options[obj] { return controller.Options[obj]{} },
		check: func(t *testing.T, r *optionsRun, c *controller.Controller[obj, list]) {
			if diff := cmp.Diff([]string{"ns1/a", "ns1/b", "ns2/c"}, keys(c)); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
			if lists := r.lists(); len(lists) != 1 || lists[0].Limit != 500 || lists[0].LabelSelector != "" {
				t.Errorf("listed with %+v, want one page of 500 and no selector", lists)
			}
		},
	}, {
		name:      "OnError receives errors named after the object type by default",
		failLists: true,
		opts: func(r *optionsRun) controller.Options[obj] {
			return controller.Options[obj]{Options: reflect.Options[obj]{Backoff: fast, OnError: r.add}}
		},
		check: func(t *testing.T, r *optionsRun, _ *controller.Controller[obj, list]) {
			r.firstErrorPrefix(t, "*v1.ConfigMap: list: ")
		},
	}, {
		name:      "Name names the errors",
		failLists: true,
		opts: func(r *optionsRun) controller.Options[obj] {
			return controller.Options[obj]{Options: reflect.Options[obj]{Name: "settings", Backoff: fast, OnError: r.add}}
		},
		check: func(t *testing.T, r *optionsRun, _ *controller.Controller[obj, list]) {
			r.firstErrorPrefix(t, "settings: list: ")
		},
	}, {
		name: "PageSize",
		opts: func(*optionsRun) controller.Options[obj] {
			return controller.Options[obj]{Options: reflect.Options[obj]{PageSize: 2}}
		},
		check: func(t *testing.T, r *optionsRun, c *controller.Controller[obj, list]) {
			lists := r.lists()
			if len(lists) != 2 || lists[0].Limit != 2 || lists[1].Limit != 2 || lists[1].Continue == "" {
				t.Errorf("listed with %+v, want two pages of 2", lists)
			}
			if n := c.Store().Len(); n != 3 {
				t.Errorf("cached %d objects, want 3", n)
			}
		},
	}, {
		name: "WatchList",
		opts: func(*optionsRun) controller.Options[obj] {
			return controller.Options[obj]{Options: reflect.Options[obj]{WatchList: true}}
		},
		check: func(t *testing.T, r *optionsRun, c *controller.Controller[obj, list]) {
			actions := r.src.Actions()
			if len(actions) == 0 || actions[0].Verb != fake.VerbWatch || actions[0].Options.SendInitialEvents == nil || !*actions[0].Options.SendInitialEvents {
				t.Errorf("began with %+v, want a watch-list", actions)
			}
			if lists := r.lists(); len(lists) != 0 {
				t.Errorf("listed with %+v, want no list", lists)
			}
			if n := c.Store().Len(); n != 3 {
				t.Errorf("cached %d objects, want 3", n)
			}
		},
	}, {
		name: "ListOptions",
		opts: func(*optionsRun) controller.Options[obj] {
			return controller.Options[obj]{Options: reflect.Options[obj]{ListOptions: func(o *metav1.ListOptions) { o.LabelSelector = "app=web" }}}
		},
		check: func(t *testing.T, r *optionsRun, c *controller.Controller[obj, list]) {
			if diff := cmp.Diff([]string{"ns1/a", "ns2/c"}, keys(c)); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
			for _, a := range r.src.Actions() {
				if a.Options.LabelSelector != "app=web" {
					t.Errorf("%s with %+v, want the label selector app=web", a.Verb, a.Options)
				}
			}
		},
	}, {
		name: "Metrics",
		opts: func(r *optionsRun) controller.Options[obj] {
			return controller.Options[obj]{Metrics: r.metrics}
		},
		check: func(t *testing.T, r *optionsRun, _ *controller.Controller[obj, list]) {
			r.metrics.mu.Lock()
			defer r.metrics.mu.Unlock()
			if r.metrics.lists != 1 || r.metrics.items != 3 || r.metrics.rv != "3" {
				t.Errorf("metrics saw %d lists of %d items up to resource version %q, want 1 of 3 up to \"3\"",
					r.metrics.lists, r.metrics.items, r.metrics.rv)
			}
		},
	}, {
		name: "KeyFunc",
		opts: func(*optionsRun) controller.Options[obj] {
			return controller.Options[obj]{KeyFunc: prefixed("cm:")}
		},
		check: func(t *testing.T, _ *optionsRun, c *controller.Controller[obj, list]) {
			if diff := cmp.Diff([]string{"cm:a", "cm:b", "cm:c"}, keys(c)); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "Transform runs before caching",
		opts: func(*optionsRun) controller.Options[obj] {
			return controller.Options[obj]{
				Options: reflect.Options[obj]{Transform: func(o obj) (obj, error) {
					o.Labels = nil
					return o, nil
				}},
			}
		},
		check: func(t *testing.T, _ *optionsRun, c *controller.Controller[obj, list]) {
			c.Store().Range(func(key string, o obj) bool {
				if o.Labels != nil {
					t.Errorf("%s is cached with labels %v", key, o.Labels)
				}
				return true
			})
		},
	}, {
		name: "Indexers",
		opts: func(*optionsRun) controller.Options[obj] {
			return controller.Options[obj]{Indexers: eventcache.Indexers[obj]{"app": web}}
		},
		check: func(t *testing.T, _ *optionsRun, c *controller.Controller[obj, list]) {
			if diff := cmp.Diff([]string{"ns1/a", "ns2/c"}, byIndex(t, c, "app", "web")); diff != "" {
				t.Errorf("ByIndex(app, web) (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"ns1/a", "ns1/b"}, byIndex(t, c, eventcache.NamespaceIndex, "ns1")); diff != "" {
				t.Errorf("the namespace index (-want +got):\n%s", diff)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &optionsRun{
				src: fake.New[obj, list](
					cm("ns1", "a", map[string]string{"app": "web"}),
					cm("ns1", "b", map[string]string{"app": "db"}),
					cm("ns2", "c", map[string]string{"app": "web"}),
				),
				metrics: &countingMetrics{events: map[watch.EventType]int{}, handled: map[string]int{}, panics: map[string]int{}},
			}
			if tt.failLists {
				r.src.FailList(1, errors.New("the server is sleeping"))
			}
			c := testctl.New(t, r.src, tt.opts(r))
			run(t, c)
			tt.check(t, r, c)
		})
	}
}

// The controller keeps its own copy of the Indexers: indexes added later do not write the
// map the caller passed.
func TestNewLeavesTheCallersIndexersAlone(t *testing.T) {
	given := eventcache.Indexers[obj]{"a": func(obj) ([]string, error) { return nil, nil }}
	c := testctl.New(t, fake.New[obj, list](), controller.Options[obj]{Indexers: given})
	if err := c.AddIndexers(eventcache.Indexers[obj]{"b": func(obj) ([]string, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	if len(given) != 1 {
		t.Errorf("the Indexers given to New have %d indexes, want 1", len(given))
	}
	for _, index := range []string{"a", "b"} {
		if _, err := c.Store().ByIndex(index, "x"); err != nil {
			t.Errorf("index %q: %v", index, err)
		}
	}
}

// A key function, transform or index function of another object type than the
// controller's is a compile error. The test builds such a file, overlaid on the module,
// and checks that the compiler rejects exactly those three lines.
func TestOptionsOfAnotherObjectTypeDoNotCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a package with the go command")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	const src = `package wrongtype

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/reflect"
)

var configMaps = fake.New[*corev1.ConfigMap, *corev1.ConfigMapList]()

var _, _ = controller.New(configMaps, controller.Options[*corev1.ConfigMap]{
	KeyFunc: func(*corev1.Secret) (string, error) { return "", nil }, // line 15
})
var _, _ = controller.New(configMaps, controller.Options[*corev1.ConfigMap]{Options: reflect.Options[*corev1.ConfigMap]{
	Transform: func(s *corev1.Secret) (*corev1.Secret, error) { return s, nil }, // line 18
}})
var _, _ = controller.New(configMaps, controller.Options[*corev1.ConfigMap]{
	Indexers: eventcache.Indexers[*corev1.ConfigMap]{
		"owner": func(*corev1.Secret) ([]string, error) { return nil, nil }, // line 22
	},
})
`
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "wrongtype.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay.json")
	// The package does not exist on disk; the overlay adds it to the module.
	target := filepath.Join(wd, "wrongtype", "wrongtype.go")
	if err := os.WriteFile(overlay, fmt.Appendf(nil, `{"Replace": {%q: %q}}`, target, file), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"build", "-overlay", overlay}
	if raceEnabled() {
		args = append(args, "-race") // reuses the test's build cache
	}
	cmd := exec.Command(goCmd, append(args, "./wrongtype")...)
	cmd.Dir = wd
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("a KeyFunc, Transform and IndexFunc of *corev1.Secret compiled for a controller of *corev1.ConfigMap")
	}
	var rejected []string
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, file+":") && strings.Contains(line, "cannot use") {
			rejected = append(rejected, strings.SplitN(strings.TrimPrefix(line, file+":"), ":", 2)[0])
		}
	}
	if diff := cmp.Diff([]string{"15", "18", "22"}, rejected); diff != "" {
		t.Errorf("lines rejected (-want +got):\n%s\nthe go command said:\n%s", diff, out)
	}
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func TestFullHistoryDeliversEveryIntermediateState(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil))
	c := testctl.New(t, src, controller.Options[obj]{FullHistory: true})
	release := make(chan struct{})
	h := newRecorder()
	h.hook = func(event.Event[obj]) { <-release }
	mustAdd(t, c, "h", h)
	run(t, c)
	_ = src.WaitForWatchers(context.Background(), 1)
	want := []seen{{Type: event.Added, Key: "ns/a", RV: "1", Sync: true}}
	for i := 0; i < 5; i++ {
		o, _ := src.Get("ns", "a")
		prior := o.ResourceVersion
		o.Data = map[string]string{"i": fmt.Sprint(i)}
		updated, err := src.Update(o)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, seen{Type: event.Modified, Key: "ns/a", RV: updated.ResourceVersion, PriorRV: prior})
	}
	// Everything has reached the cache before the handler moves on from its first event.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return c.LastSyncResourceVersion() == want[5].RV, nil }); err != nil {
		t.Fatal(err)
	}
	close(release)
	if diff := cmp.Diff(want, h.waitFor(t, len(want))); diff != "" {
		t.Errorf("a handler behind by 5 changes saw (-want +got):\n%s", diff)
	}
}

func TestResyncRedeliversKnownObjectsEveryPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	src := fake.New[obj, list](cm("ns", "a", nil), cm("ns", "b", nil))
	c := testctl.New(t, src, controller.Options[obj]{Options: reflect.Options[obj]{Clock: clk, ResyncPeriod: time.Minute}})
	h := newRecorder()
	mustAdd(t, c, "h", h)
	run(t, c)
	h.waitFor(t, 2)
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return clk.HasWaiters(), nil }); err != nil {
		t.Fatal(err)
	}
	if got := h.events(); len(got) != 2 {
		t.Fatalf("events before the period elapsed: %+v", got)
	}
	clk.Step(time.Minute)
	got := h.waitFor(t, 4)[2:]
	sort.Slice(got, func(i, j int) bool { return got[i].Key < got[j].Key })
	want := []seen{
		{Type: event.Modified, Key: "ns/a", RV: "1", PriorRV: "1", Sync: true},
		{Type: event.Modified, Key: "ns/b", RV: "2", PriorRV: "2", Sync: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resync delivered (-want +got):\n%s", diff)
	}
}

func TestErrorHandlerMayAddAHandler(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil))
	var c *controller.Controller[obj, list]
	var once sync.Once
	added := make(chan *controller.Registration, 1)
	c = testctl.New(t, src, controller.Options[obj]{
		Options: reflect.Options[obj]{OnError: func(context.Context, error) {
			// Index errors are reported from the drain loop, which adding a handler
			// pauses: that must not deadlock.
			once.Do(func() {
				reg, err := c.AddHandler("added-on-error", newRecorder())
				if err != nil {
					t.Error(err)
				}
				added <- reg
			})
		}},
		Indexers: eventcache.Indexers[obj]{"fails": func(obj) ([]string, error) { return nil, errors.New("no values") }},
	})
	run(t, c)
	select {
	case reg := <-added:
		<-reg.Synced()
	case <-time.After(30 * time.Second):
		t.Fatal("the error handler could not add a handler")
	}
}
