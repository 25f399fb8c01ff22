package manager_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// testTimeout bounds every wait for a condition: generous, since the tests depend on what
// eventually happens, never on how fast.
const testTimeout = 30 * time.Second

type (
	cm     = *corev1.ConfigMap
	cmList = *corev1.ConfigMapList
	cmFake = fake.ListerWatcher[cm, cmList]
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func receive[V any](t *testing.T, ch <-chan V, what string) V {
	t.Helper()
	return testwait.Receive(t, ch, what, testTimeout)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, what, cond, testTimeout)
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func configMap(ns, name string, labels map[string]string) cm {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
}

// inNamespace is a fake's ListerWatcher narrowed to one namespace, through the field
// selector the fake and the API server both support, as a clientset's namespaced client
// is narrowed by its path.
type inNamespace[T event.Object, L fake.List] struct {
	f  *fake.ListerWatcher[T, L]
	ns string
}

func (n inNamespace[T, L]) narrow(opts metav1.ListOptions) metav1.ListOptions {
	sel := "metadata.namespace=" + n.ns
	if opts.FieldSelector != "" {
		sel += "," + opts.FieldSelector
	}
	opts.FieldSelector = sel
	return opts
}

func (n inNamespace[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	return n.f.List(ctx, n.narrow(opts))
}

func (n inNamespace[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return n.f.Watch(ctx, n.narrow(opts))
}

// sourceOf is the Source of f's objects, per namespace like a clientset's.
func sourceOf[T event.Object, L fake.List](f *fake.ListerWatcher[T, L]) manager.Source[T, L] {
	return manager.Namespaced[T](func(ns string) controller.ListerWatcher[T, L] {
		if ns == "" {
			return f
		}
		return inNamespace[T, L]{f, ns}
	})
}

func source(f *cmFake) manager.Source[cm, cmList] { return sourceOf(f) }

// lists counts the lists of f's objects a cache made: first pages of paged lists and
// watch-list requests (a cache's default).
func lists[T event.Object, L fake.List](f *fake.ListerWatcher[T, L]) int {
	n := 0
	for _, a := range f.Actions() {
		if a.Verb == fake.VerbList && a.Options.Continue == "" || a.Verb == fake.VerbWatch && a.Options.SendInitialEvents != nil {
			n++
		}
	}
	return n
}

// acquire is manager.Acquire that fails the test on an error.
func acquire(t *testing.T, m *manager.Manager, src manager.Source[cm, cmList], opts ...manager.CacheOptions[cm]) *manager.Cache[cm] {
	t.Helper()
	c, err := manager.Acquire(m, src, opts...)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return c
}

// testContext returns a context whose logger writes to t, ended when the test ends.
func testContext(t *testing.T) context.Context {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	t.Cleanup(cancel)
	return ctx
}

// running is a Manager's Run under way.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// run starts m.Run and returns once its runnables run, so that a goroutine snapshot
// taken then holds the Manager's own. The test's end stops it, if the test did not, and
// checks that it returned nil and left no goroutine behind.
func run(t *testing.T, m *manager.Manager) *running {
	t.Helper()
	return runIn(t, testContext(t), m)
}

// runIn is run with Run's context derived from parent.
func runIn(t *testing.T, parent context.Context, m *manager.Manager) *running {
	t.Helper()
	started := make(chan struct{})
	var once sync.Once
	if err := m.Add("started", manager.RunnableFunc(func(ctx context.Context) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	r := startIn(t, parent, m)
	receive(t, started, "the manager runs its runnables")
	return r
}

// start starts m.Run; the test's end stops it, if the test did not, and checks that it
// returned nil and left no goroutine behind.
func start(t *testing.T, m *manager.Manager) *running {
	t.Helper()
	return startIn(t, testContext(t), m)
}

// loggedContext is testContext whose log entries the test can read.
func loggedContext(t *testing.T) (context.Context, ktesting.Buffer) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4), ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	t.Cleanup(cancel)
	return ctx, logger.GetSink().(ktesting.Underlier).GetBuffer()
}

// startIn is start with Run's context derived from parent.
func startIn(t *testing.T, parent context.Context, m *manager.Manager) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		if err := r.stop(t); err != nil {
			t.Errorf("Run = %v", err)
		}
		goleak.VerifyNone(t)
	})
	return r
}

// stop cancels Run's context and returns what Run returned; it can be called again.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		r.err = receive(t, r.done, "Run returns once its context ended")
	})
	return r.err
}

// probe is one response of a probe handler.
type probe struct {
	Code int
	Body string
}

func get(h http.Handler, path string) probe {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return probe{Code: rec.Code, Body: string(body)}
}

// keys returns the sorted keys of objs.
func keys[T event.Object](objs []T) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		k, _ := event.ObjectKey(o)
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// reconciles records the keys a Loop reconciles, in order, and hands each to a channel.
type reconciles struct {
	mu   sync.Mutex
	keys []string
	ch   chan string
}

func newReconciles() *reconciles { return &reconciles{ch: make(chan string, 1000)} }

func (r *reconciles) reconcile(_ context.Context, req typed.Request[cm]) (typed.Result, error) {
	r.mu.Lock()
	r.keys = append(r.keys, req.Key)
	r.mu.Unlock()
	r.ch <- req.Key
	return typed.Result{}, nil
}

func (r *reconciles) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]string(nil), r.keys...)
	sort.Strings(out)
	return out
}
