//go:build unix

package website_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// waitTimeout bounds every wait for a condition: the tests wait for what eventually
// happens, never for a time.
const waitTimeout = 60 * time.Second

// cluster is the test environment with the clients the tests use.
type cluster struct {
	config     *rest.Config
	cs         kubernetes.Interface
	websites   func(namespace string) *client.Dynamic[*website.Website]
	websitesV2 func(namespace string) *client.Dynamic[*website.WebsiteV2]
	hooks      *webhooks
}

// TestWebsiteOperator runs the Website operator against a real kube-apiserver and etcd
// (typed/testenv), one namespace per behaviour. No kube-controller-manager runs: the
// Deployments get no pods, their status is whatever a test writes, and no garbage
// collector deletes owned objects, so the finalizer's cleanup is the operator's own.
func TestWebsiteOperator(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		// Every replica has stopped: nothing of theirs may be left but idle connections.
		var err error
		eventually(t, "no goroutine left", func() (bool, string) {
			err = goleak.Find(before, goleak.IgnoreAnyFunction(testenv.SpawnerFunction), goleak.IgnoreAnyFunction(testenv.WaiterFunction),
				goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
				goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"), goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"))
			return err == nil, fmt.Sprint(err)
		})
	})
	c := &cluster{config: env.AdminConfig(), cs: kubernetes.NewForConfigOrDie(env.AdminConfig())}
	c.websites = client.FromDynamicNamespaced[*website.Website](dynamic.NewForConfigOrDie(env.AdminConfig()).Resource(website.Resource))
	c.websitesV2 = client.FromDynamicNamespaced[*website.WebsiteV2](dynamic.NewForConfigOrDie(env.AdminConfig()).Resource(website.ResourceV2))
	// One replica serves the webhooks for the whole test, and the CRD is installed with
	// its conversion pointing at it: every Website below goes through them.
	c.serveWebhooks(t, env)
	c.webhookTests(t)

	t.Run("a created Website gets its ConfigMap, Deployment, finalizer, status and Events", func(t *testing.T) {
		ns := c.namespace(t)
		r := c.start(t, ns, "a")
		w := c.create(t, ns, "hello", "Hello, world", 2)
		c.converged(t, w)
		// Options.Metrics is the Manager's: it hears from the loop and from every cache.
		want := fmt.Sprint([]string{"website"}, []string{"*v1.ConfigMap namespace=" + ns, "*v1.Deployment namespace=" + ns, "*website.Website namespace=" + ns})
		eventually(t, "the loop's and every cache's metrics", func() (bool, string) {
			got := fmt.Sprint(r.metrics.seen())
			return got == want, "loops that reconciled, controllers that listed: " + got + ", want " + want
		})
		got := c.websiteNow(t, w)
		ready := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Message != "0 of 2 replicas ready" {
			t.Errorf("Ready condition = %+v; want False, 0 of 2 replicas ready (no pods run here)", ready)
		}
		c.events(t, w, "Created ConfigMap hello", "Created Deployment hello")
	})

	t.Run("a Deployment or ConfigMap edited behind the operator's back is put right", func(t *testing.T) {
		ns := c.namespace(t)
		c.start(t, ns, "a")
		w := c.converged(t, c.create(t, ns, "drift", "steady", 2))
		update(t, c.cs.AppsV1().Deployments(ns), "drift", func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](5)
			d.Spec.Template.Spec.Containers[0].Image = "evil:latest"
		})
		update(t, c.cs.CoreV1().ConfigMaps(ns), "drift", func(cm *corev1.ConfigMap) { cm.Data["index.html"] = "defaced" })
		c.converged(t, w)
		c.events(t, w, "Updated Deployment drift", "Updated ConfigMap drift")
	})

	t.Run("a change of the message or the replicas is followed", func(t *testing.T) {
		ns := c.namespace(t)
		c.start(t, ns, "a")
		w := c.converged(t, c.create(t, ns, "follow", "first", 1))
		w = c.updateWebsite(t, w, func(w *website.Website) { w.Spec.Message, w.Spec.Replicas = "second", 3 })
		c.converged(t, w)
	})

	t.Run("readiness follows the Deployment's status, and an unchanged object is not written", func(t *testing.T) {
		ns := c.namespace(t)
		c.start(t, ns, "a")
		w := c.converged(t, c.create(t, ns, "ready", "up", 2))
		cm := get(t, c.cs.CoreV1().ConfigMaps(ns), "ready")
		// What the deployment controller would write once two pods are ready.
		d := get(t, c.cs.AppsV1().Deployments(ns), "ready")
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
		d, err := c.cs.AppsV1().Deployments(ns).UpdateStatus(context.Background(), d, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the Website reports 2 ready replicas, Ready", func() (bool, string) {
			got := c.websiteNow(t, w)
			ready := meta.FindStatusCondition(got.Status.Conditions, "Ready")
			return got.Status.ReadyReplicas == 2 && ready != nil && ready.Status == metav1.ConditionTrue,
				fmt.Sprintf("status %+v", got.Status)
		})
		// The reconcile that wrote that status compared the Deployment and the ConfigMap
		// with what they should be, and wrote neither.
		if got := get(t, c.cs.AppsV1().Deployments(ns), "ready").ResourceVersion; got != d.ResourceVersion {
			t.Errorf("the Deployment was written again (resource version %s, then %s)", d.ResourceVersion, got)
		}
		if got := get(t, c.cs.CoreV1().ConfigMaps(ns), "ready").ResourceVersion; got != cm.ResourceVersion {
			t.Errorf("the ConfigMap was written again (resource version %s, then %s)", cm.ResourceVersion, got)
		}
	})

	t.Run("a deleted Website's finalizer deletes its Deployment and ConfigMap, then lets it go", func(t *testing.T) {
		ns := c.namespace(t)
		c.start(t, ns, "a")
		w := c.converged(t, c.create(t, ns, "bye", "so long", 1))
		c.delete(t, w)
		c.gone(t, w)
		c.events(t, w, "Deleted Deployment bye", "Deleted ConfigMap bye")
	})

	t.Run("an object controlled by another owner is never touched, and deleting the Website still completes", func(t *testing.T) {
		ns := c.namespace(t)
		c.start(t, ns, "a")
		someone, err := c.cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "someone"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		theirs := deployment(ns, "taken", 7)
		theirs.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(someone, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}
		theirs, err = c.cs.AppsV1().Deployments(ns).Create(context.Background(), theirs, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w := c.create(t, ns, "taken", "mine", 1)
		// Its reconciles keep failing on the Deployment, saying why.
		c.events(t, w, "Deployment taken: creating or updating")
		eventually(t, "the Website's own ConfigMap is made all the same", func() (bool, string) {
			cm, err := c.cs.CoreV1().ConfigMaps(ns).Get(context.Background(), "taken", metav1.GetOptions{})
			return err == nil && cm.Data["index.html"] == "mine", fmt.Sprint(err)
		})
		c.delete(t, w)
		c.gone(t, w, "Deployment") // the ConfigMap was its own; the Deployment is not
		got := get(t, c.cs.AppsV1().Deployments(ns), "taken")
		if diff := cmp.Diff(theirs.Spec, got.Spec); diff != "" || got.ResourceVersion != theirs.ResourceVersion {
			t.Errorf("the other owner's Deployment was written (-before +after):\n%s", diff)
		}
	})

	t.Run("when the leader stops, the other replica takes over and misses no key", func(t *testing.T) {
		ns := c.namespace(t)
		replicas := map[string]*replica{"a": c.start(t, ns, "a"), "b": c.start(t, ns, "b")}
		var ws []*website.Website
		for i := range 4 {
			ws = append(ws, c.create(t, ns, fmt.Sprintf("before-%d", i), "v1", 1))
		}
		for _, w := range ws {
			c.converged(t, w)
		}
		leader := c.leader(t, ns, "")
		replicas[leader].stop(t)
		standby := map[string]string{"a": "b", "b": "a"}[leader]

		// Changes made once the leader has stopped, while the standby takes over: each
		// must be reconciled by the standby, which only its warm cache and the Loop's
		// start (every cached key is reconciled when a term begins) can ensure.
		updated := c.updateWebsite(t, ws[0], func(w *website.Website) { w.Spec.Message = "v2" })
		c.delete(t, ws[1])
		var created []*website.Website
		for i := range 6 {
			created = append(created, c.create(t, ns, fmt.Sprintf("during-%d", i), "v1", 2))
		}
		if got := c.leader(t, ns, leader); got != standby {
			t.Errorf("the Lease is held by %q, want the standby %q", got, standby)
		}
		c.converged(t, updated)
		c.gone(t, ws[1])
		for _, w := range append(created, ws[2:]...) {
			c.converged(t, w)
		}
	})
}

// replica is one running replica of the operator.
type replica struct {
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	metrics *metrics
}

// metrics records the loops that reconciled and the controllers that listed, of the
// metrics family a Manager reports (manager.Metrics).
type metrics struct {
	mu                 sync.Mutex
	loops, controllers map[string]bool
}

func (m *metrics) record(names map[string]bool, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	names[name] = true
}

// seen returns the loops that reconciled and the controllers that listed, sorted.
func (m *metrics) seen() (loops, controllers []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.loops)), slices.Sorted(maps.Keys(m.controllers))
}

func (m *metrics) ReconcileLatency(loop string, _ time.Duration) { m.record(m.loops, loop) }
func (m *metrics) Listed(controller string, _ int, _ time.Duration) {
	m.record(m.controllers, controller)
}
func (*metrics) QueueDepth(string, int)                       {}
func (*metrics) Retry(string)                                 {}
func (*metrics) ReconcileError(string, bool)                  {}
func (*metrics) WatchEvent(string, watch.EventType)           {}
func (*metrics) ResourceVersion(string, string)               {}
func (*metrics) ListWatchError(string)                        {}
func (*metrics) EventQueueDepth(string, int)                  {}
func (*metrics) HandlerLatency(string, string, time.Duration) {}
func (*metrics) HandlerPanic(string, string)                  {}

// start runs a replica of the operator in ns, as identity, until the test ends or stop.
func (c *cluster) start(t *testing.T, ns, identity string, options ...func(*website.Options)) *replica {
	t.Helper()
	// Each replica has clients of its own, as separate processes would.
	m := &metrics{loops: map[string]bool{}, controllers: map[string]bool{}}
	opts := website.Options{Namespace: ns, Metrics: m,
		LeaderElection: leaderelection.Config{Identity: identity, LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}}
	for _, o := range options {
		o(&opts)
	}
	op, err := website.New(kubernetes.NewForConfigOrDie(c.config), c.config, opts)
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))).WithValues("replica", identity)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	r := &replica{cancel: cancel, done: make(chan error, 1), metrics: m}
	go func() { r.done <- op.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the replica and waits for its Run to return.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("replica: Run = %v", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("replica: Run did not return within %s", waitTimeout)
		}
	})
}

// leader waits for a replica other than not to hold the Lease in ns, and returns it.
func (c *cluster) leader(t *testing.T, ns, not string) string {
	t.Helper()
	var holder string
	eventually(t, "a replica other than "+fmt.Sprintf("%q", not)+" leads", func() (bool, string) {
		lease, err := c.cs.CoordinationV1().Leases(ns).Get(context.Background(), website.Component, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		holder = ptr.Deref(lease.Spec.HolderIdentity, "")
		return holder != "" && holder != not, "held by " + holder
	})
	return holder
}

func (c *cluster) namespace(t *testing.T) string {
	t.Helper()
	ns, err := c.cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "website-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func (c *cluster) create(t *testing.T, ns, name, message string, replicas int32) *website.Website {
	t.Helper()
	w, err := c.websites(ns).Create(context.Background(), &website.Website{
		TypeMeta:   metav1.TypeMeta{APIVersion: website.Kind.GroupVersion().String(), Kind: website.Kind.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       website.WebsiteSpec{Message: message, Replicas: replicas},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// updateWebsite changes w's spec, retrying on conflicts with the operator's writes, and
// returns the result.
func (c *cluster) updateWebsite(t *testing.T, w *website.Website, change func(*website.Website)) *website.Website {
	t.Helper()
	var out *website.Website
	retryOnConflict(t, "updating Website "+w.Name, func() error {
		cur, err := c.websites(w.Namespace).Get(context.Background(), w.Name, metav1.GetOptions{})
		if err == nil {
			change(cur)
			out, err = c.websites(w.Namespace).Update(context.Background(), cur, metav1.UpdateOptions{})
		}
		return err
	})
	return out
}

func (c *cluster) delete(t *testing.T, w *website.Website) {
	t.Helper()
	err := dynamic.NewForConfigOrDie(c.config).Resource(website.Resource).Namespace(w.Namespace).Delete(context.Background(), w.Name, metav1.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) websiteNow(t *testing.T, w *website.Website) *website.Website {
	t.Helper()
	got, err := c.websites(w.Namespace).Get(context.Background(), w.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// converged waits until w's spec, as w says it, is what its ConfigMap, Deployment and
// status say, with the finalizer on w, and returns the Website as it then is.
func (c *cluster) converged(t *testing.T, w *website.Website) *website.Website {
	t.Helper()
	ctx := context.Background()
	var got *website.Website
	eventually(t, "Website "+w.Name+" converged", func() (bool, string) {
		var err error
		if got, err = c.websites(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		var problems []string
		if !slices.Contains(got.Finalizers, website.Finalizer) {
			problems = append(problems, "no finalizer")
		}
		if got.Generation != w.Generation || got.Status.ObservedGeneration != got.Generation {
			problems = append(problems, fmt.Sprintf("generation %d (want %d), observed %d", got.Generation, w.Generation, got.Status.ObservedGeneration))
		}
		cm, err := c.cs.CoreV1().ConfigMaps(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			problems = append(problems, "ConfigMap: "+err.Error())
		case cm.Data["index.html"] != w.Spec.Message || cm.Data["title"] != got.Spec.Title || got.Spec.Title == "" || !controlledBy(cm, got):
			problems = append(problems, fmt.Sprintf("ConfigMap %v, controller %v", cm.Data, metav1.GetControllerOf(cm)))
		}
		d, err := c.cs.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			problems = append(problems, "Deployment: "+err.Error())
		case ptr.Deref(d.Spec.Replicas, -1) != w.Spec.Replicas || d.Spec.Template.Spec.Containers[0].Image != website.Image || !controlledBy(d, got):
			problems = append(problems, fmt.Sprintf("Deployment replicas %d, image %s, controller %v",
				ptr.Deref(d.Spec.Replicas, -1), d.Spec.Template.Spec.Containers[0].Image, metav1.GetControllerOf(d)))
		}
		return problems == nil, strings.Join(problems, "; ")
	})
	return got
}

func controlledBy(obj metav1.Object, w *website.Website) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == w.UID && ref.Kind == website.Kind.Kind
}

// gone waits until w, and its objects but those of the kinds in kept, no longer exist.
func (c *cluster) gone(t *testing.T, w *website.Website, kept ...string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "Website "+w.Name+" and its objects gone", func() (bool, string) {
		var present []string
		if _, err := c.websites(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			present = append(present, fmt.Sprintf("Website (%v)", err))
		}
		if _, err := c.cs.CoreV1().ConfigMaps(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) && !slices.Contains(kept, "ConfigMap") {
			present = append(present, fmt.Sprintf("ConfigMap (%v)", err))
		}
		if _, err := c.cs.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) && !slices.Contains(kept, "Deployment") {
			present = append(present, fmt.Sprintf("Deployment (%v)", err))
		}
		return present == nil, "still there: " + strings.Join(present, ", ")
	})
}

// events waits until Events about w with each of notes (as prefixes) have been recorded.
func (c *cluster) events(t *testing.T, w *website.Website, notes ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("Events %q about Website %s", notes, w.Name), func() (bool, string) {
		list, err := c.cs.EventsV1().Events(w.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind == website.Kind.Kind && e.Regarding.Name == w.Name {
				seen = append(seen, e.Note)
			}
		}
		for _, note := range notes {
			if !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, note) }) {
				return false, fmt.Sprintf("seen %q", seen)
			}
		}
		return true, ""
	})
}

func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "theirs"}}}},
	}}
}

// getter and updater are what the helpers need of a generated client.
type getter[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
}

type updater[T any] interface {
	getter[T]
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

func get[T any](t *testing.T, c getter[T], name string) T {
	t.Helper()
	obj, err := c.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// update changes an object behind the operator's back, retrying on conflicts.
func update[T any](t *testing.T, c updater[T], name string, change func(T)) {
	t.Helper()
	retryOnConflict(t, "updating "+name, func() error {
		obj, err := c.Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			change(obj)
			_, err = c.Update(context.Background(), obj, metav1.UpdateOptions{})
		}
		return err
	})
}

// retryOnConflict calls write until it returns no conflict, and fails the test on any
// other error.
func retryOnConflict(t *testing.T, what string, write func() error) {
	t.Helper()
	var err error
	eventually(t, what, func() (bool, string) {
		err = write()
		return !apierrors.IsConflict(err), fmt.Sprint(err)
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eventually polls cond until it holds, failing the test with cond's last word if it
// does not within waitTimeout.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		var ok bool
		ok, last = cond()
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s: %s", what, waitTimeout, last)
	}
}
