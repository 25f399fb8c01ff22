package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/internal/demo/democluster"
	"github.com/typedinformer/typedinformer/typed/client"
)

// show is the demo's state: the cluster's clients, the replicas, and what each step took.
type show struct {
	s        settings
	ns       string
	cs       kubernetes.Interface
	websites func(namespace string) *client.Dynamic[*website.Website]
	dyn      dynamic.ResourceInterface

	replicas []*replica
	want     map[string]website.WebsiteSpec // the Websites that should exist, by name
	steps    []stepResult
}

// stepResult is one step's line of the summary.
type stepResult struct {
	name       string
	took       time.Duration
	reconciles int64
}

// poll is how often the demo looks at the server while it waits for a step to converge.
const poll = 20 * time.Millisecond

func (sh *show) run(ctx context.Context, cl *democluster.Cluster) error {
	sh.want = map[string]website.WebsiteSpec{}
	fmt.Printf("operator  examples/website: Websites own a ConfigMap (the message) and a Deployment (nginx), with a finalizer, status and Events\n")

	header("start two replicas of the operator, under leader election")
	start := time.Now()
	a, err := startReplica(ctx, cl.Config, sh.ns, "replica-a")
	if err != nil {
		return err
	}
	sh.replicas = append(sh.replicas, a)
	if _, err := sh.leader(ctx, ""); err != nil {
		return err
	}
	fmt.Printf("  replica-a leads after %s\n", round(time.Since(start)))
	start = time.Now()
	b, err := startReplica(ctx, cl.Config, sh.ns, "replica-b")
	if err != nil {
		return err
	}
	sh.replicas = append(sh.replicas, b)
	for _, wait := range []func(context.Context) error{b.op.Websites.WaitForSync, b.op.Deployments.WaitForSync, b.op.ConfigMaps.WaitForSync} {
		if err := wait(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("  replica-b is a standby: its caches of Websites, Deployments and ConfigMaps synced in %s, its loop waits for the Lease\n", round(time.Since(start)))

	header(fmt.Sprintf("1. create %d Websites", sh.s.websites))
	names := []string{"blog", "shop", "docs"}
	for i := 4; i <= sh.s.websites; i++ {
		names = append(names, fmt.Sprintf("site-%d", i))
	}
	err = sh.step(ctx, "create", func() error {
		for i, name := range names {
			spec := website.WebsiteSpec{Message: "Hello from " + name, Replicas: int32(i%3 + 1)}
			if err := sh.create(ctx, name, spec); err != nil {
				return err
			}
			fmt.Printf("  + Website %-6s replicas %d, message %q\n", name, spec.Replicas, spec.Message)
		}
		return nil
	}, names...)
	if err != nil {
		return err
	}
	if w, err := sh.websites(sh.ns).Get(ctx, "shop", metav1.GetOptions{}); err == nil {
		if ready := meta.FindStatusCondition(w.Status.Conditions, "Ready"); ready != nil {
			note := ""
			if cl.Local && ready.Status != metav1.ConditionTrue {
				note = " (no kube-controller-manager runs here: Deployments get no pods)"
			}
			fmt.Printf("  status of shop: observedGeneration %d, Ready=%s, %q%s\n", w.Status.ObservedGeneration, ready.Status, ready.Message, note)
		}
	}

	header("2. edit Deployment blog and ConfigMap shop behind the operator's back")
	err = sh.step(ctx, "drift", func() error {
		var before appsv1.Deployment
		err := update(ctx, sh.cs.AppsV1().Deployments(sh.ns), "blog", func(d *appsv1.Deployment) {
			before = *d.DeepCopy()
			d.Spec.Replicas = ptr.To[int32](5)
			d.Spec.Template.Spec.Containers[0].Image = "nginx:defaced"
		})
		if err != nil {
			return err
		}
		fmt.Printf("  ~ Deployment blog: replicas %d → 5, image %s → nginx:defaced\n", ptr.Deref(before.Spec.Replicas, 0), before.Spec.Template.Spec.Containers[0].Image)
		err = update(ctx, sh.cs.CoreV1().ConfigMaps(sh.ns), "shop", func(cm *corev1.ConfigMap) { cm.Data["index.html"] = "defaced" })
		if err == nil {
			fmt.Printf("  ~ ConfigMap shop: message → %q\n", "defaced")
		}
		return err
	}, "blog", "shop")
	if err != nil {
		return err
	}
	if d, err := sh.cs.AppsV1().Deployments(sh.ns).Get(ctx, "blog", metav1.GetOptions{}); err == nil {
		fmt.Printf("  Deployment blog is back to replicas %d, image %s\n", ptr.Deref(d.Spec.Replicas, 0), d.Spec.Template.Spec.Containers[0].Image)
	}

	header("3. change the message and replicas of Website shop")
	err = sh.step(ctx, "message", func() error {
		spec := website.WebsiteSpec{Message: "Spring sale: everything must go", Replicas: 3}
		fmt.Printf("  ~ Website shop: message %q, replicas %d\n", spec.Message, spec.Replicas)
		return sh.update(ctx, "shop", spec)
	}, "shop")
	if err != nil {
		return err
	}

	header("4. delete Website docs: its finalizer deletes what it owns (no garbage collector needed)")
	if err := sh.deleteWithFinalizer(ctx, "docs"); err != nil {
		return err
	}

	leader, err := sh.leader(ctx, "")
	if err != nil {
		return err
	}
	standby := sh.other(leader)
	header(fmt.Sprintf("5. stop the leader %s; make changes while %s takes over", leader.name, standby.name))
	standbyBefore := standby.metrics.reconciles.Load()
	stopStart := time.Now()
	if err := leader.stop(); err != nil {
		return err
	}
	fmt.Printf("  ■ %s stopped in %s: its in-flight reconciles finished, then it released the Lease\n", leader.name, round(time.Since(stopStart)))
	var changed time.Time
	err = sh.step(ctx, "hand-over", func() error {
		if err := sh.create(ctx, "wiki", website.WebsiteSpec{Message: "Hello from wiki", Replicas: 1}); err != nil {
			return err
		}
		fmt.Printf("  + Website wiki   replicas 1, message %q\n", "Hello from wiki")
		if err := sh.update(ctx, "blog", website.WebsiteSpec{Message: "Written during the hand-over", Replicas: sh.want["blog"].Replicas}); err != nil {
			return err
		}
		fmt.Printf("  ~ Website blog: message %q\n", "Written during the hand-over")
		changed = time.Now()
		return nil
	}, slices.Sorted(maps.Keys(sh.want))...) // every Website: none may be missed
	if err != nil {
		return err
	}
	if led := standby.led.Load(); led != nil {
		when := "after the changes: they were waiting in its warm caches"
		if led.Before(changed) {
			when = "while the changes were being made"
		}
		fmt.Printf("  %s took the Lease %s after %s stopped, %s\n", standby.name, round(led.Sub(stopStart)), leader.name, when)
	}
	fmt.Printf("  every Website is as its spec says, with %s by %s since it took over\n",
		plural(standby.metrics.reconciles.Load()-standbyBefore, "reconcile"), standby.name)

	if err := sh.summary(ctx, cl, standby); err != nil {
		return err
	}

	header("clean up: delete the remaining Websites while the operator runs, then stop it")
	remaining := slices.Sorted(maps.Keys(sh.want))
	for _, name := range remaining {
		if err := sh.dyn.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	start = time.Now()
	if err := sh.waitGone(ctx, remaining...); err != nil {
		return err
	}
	fmt.Printf("  %d Websites and their objects deleted in %s\n", len(remaining), round(time.Since(start)))
	return sh.stopAll()
}

// step runs act, then waits until every Website in names has converged, and records how
// long that took, from the end of act, and how many reconciles it took.
func (sh *show) step(ctx context.Context, name string, act func() error, names ...string) error {
	before := sh.reconciles()
	if err := act(); err != nil {
		return err
	}
	start := time.Now()
	if err := sh.converged(ctx, names...); err != nil {
		return fmt.Errorf("step %q: %w", name, err)
	}
	r := stepResult{name: name, took: time.Since(start), reconciles: sh.reconciles() - before}
	sh.steps = append(sh.steps, r)
	fmt.Printf("  ✓ converged in %s (%s)\n", round(r.took), plural(r.reconciles, "reconcile"))
	return nil
}

func (sh *show) reconciles() int64 {
	var n int64
	for _, r := range sh.replicas {
		n += r.metrics.reconciles.Load()
	}
	return n
}

func (sh *show) create(ctx context.Context, name string, spec website.WebsiteSpec) error {
	_, err := sh.websites(sh.ns).Create(ctx, &website.Website{
		TypeMeta:   metav1.TypeMeta{APIVersion: website.Kind.GroupVersion().String(), Kind: website.Kind.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: sh.ns, Name: name},
		Spec:       spec,
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Website %s: %w", name, err)
	}
	sh.want[name] = spec
	return nil
}

// update sets a Website's spec, retrying on conflicts with the operator's writes.
func (sh *show) update(ctx context.Context, name string, spec website.WebsiteSpec) error {
	err := update(ctx, sh.websites(sh.ns), name, func(w *website.Website) { w.Spec = spec })
	if err != nil {
		return fmt.Errorf("updating Website %s: %w", name, err)
	}
	sh.want[name] = spec
	return nil
}

// converged waits until each named Website is as sh.want says on the server: its
// finalizer on, its spec observed in its status, and its ConfigMap and Deployment as its
// spec says and controlled by it.
func (sh *show) converged(ctx context.Context, names ...string) error {
	var problem string
	err := wait.PollUntilContextTimeout(ctx, poll, sh.s.timeout, true, func(ctx context.Context) (bool, error) {
		problem = ""
		for _, name := range names {
			if problem = sh.problem(ctx, name); problem != "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("not converged within %s: %s", sh.s.timeout, problem)
	}
	return err
}

// problem says how Website name differs from what it should be, "" if it does not.
func (sh *show) problem(ctx context.Context, name string) string {
	want := sh.want[name]
	w, err := sh.websites(sh.ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err != nil:
		return fmt.Sprintf("Website %s: %v", name, err)
	case !slices.Contains(w.Finalizers, website.Finalizer):
		return fmt.Sprintf("Website %s has no finalizer", name)
	case w.Status.ObservedGeneration != w.Generation || w.Spec != want:
		return fmt.Sprintf("Website %s: generation %d observed %d", name, w.Generation, w.Status.ObservedGeneration)
	}
	cm, err := sh.cs.CoreV1().ConfigMaps(sh.ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err != nil:
		return fmt.Sprintf("ConfigMap %s: %v", name, err)
	case cm.Data["index.html"] != want.Message || !metav1.IsControlledBy(cm, w):
		return fmt.Sprintf("ConfigMap %s: %q", name, cm.Data["index.html"])
	}
	d, err := sh.cs.AppsV1().Deployments(sh.ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err != nil:
		return fmt.Sprintf("Deployment %s: %v", name, err)
	case ptr.Deref(d.Spec.Replicas, -1) != want.Replicas || d.Spec.Template.Spec.Containers[0].Image != website.Image || !metav1.IsControlledBy(d, w):
		return fmt.Sprintf("Deployment %s: replicas %d, image %s", name, ptr.Deref(d.Spec.Replicas, -1), d.Spec.Template.Spec.Containers[0].Image)
	}
	return ""
}

// deleteWithFinalizer deletes Website name and shows, through a watch, the finalizer
// holding it until its cleanup has deleted its ConfigMap and Deployment.
func (sh *show) deleteWithFinalizer(ctx context.Context, name string) error {
	list, err := sh.dyn.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return err
	}
	w, err := sh.dyn.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		return err
	}
	defer w.Stop()
	before := sh.reconciles()
	if err := sh.dyn.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	start := time.Now()
	delete(sh.want, name)
	fmt.Printf("  - Website %s deleted\n", name)
	timeout := time.After(sh.s.timeout)
	for gone := false; !gone; {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch of the deleted Website ended early")
			}
			switch e.Type {
			case watch.Modified:
				if obj, err := meta.Accessor(e.Object); err == nil && obj.GetDeletionTimestamp() != nil {
					fmt.Printf("    %s  deletionTimestamp set; finalizers %q hold it\n", since(start), obj.GetFinalizers())
				}
			case watch.Deleted:
				fmt.Printf("    %s  finalizer removed: the Website is gone\n", since(start))
				gone = true
			}
		case <-timeout:
			return fmt.Errorf("Website %s not gone within %s", name, sh.s.timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sh.waitGone(ctx, name); err != nil {
		return err
	}
	r := stepResult{name: "delete", took: time.Since(start), reconciles: sh.reconciles() - before}
	sh.steps = append(sh.steps, r)
	fmt.Printf("  ✓ ConfigMap %s and Deployment %s deleted by the cleanup, Website gone in %s (%s)\n", name, name, round(r.took), plural(r.reconciles, "reconcile"))
	return nil
}

// waitGone waits until the named Websites and their ConfigMaps and Deployments are gone.
func (sh *show) waitGone(ctx context.Context, names ...string) error {
	var left []string
	err := wait.PollUntilContextTimeout(ctx, poll, sh.s.timeout, true, func(ctx context.Context) (bool, error) {
		left = nil
		for _, name := range names {
			if _, err := sh.dyn.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "Website "+name)
			}
			if _, err := sh.cs.CoreV1().ConfigMaps(sh.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "ConfigMap "+name)
			}
			if _, err := sh.cs.AppsV1().Deployments(sh.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "Deployment "+name)
			}
		}
		return left == nil, nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("still there after %s: %s", sh.s.timeout, strings.Join(left, ", "))
	}
	return err
}

// leader waits until a replica other than not holds the Lease, and returns it.
func (sh *show) leader(ctx context.Context, not string) (*replica, error) {
	var found *replica
	err := wait.PollUntilContextTimeout(ctx, poll, sh.s.timeout, true, func(ctx context.Context) (bool, error) {
		holder, err := leaseHolder(ctx, sh.cs, sh.ns)
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		for _, r := range sh.replicas {
			if r.name == holder && holder != not && !r.stopped {
				found = r
			}
		}
		return found != nil, nil
	})
	if err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("no replica led within %s: %w", sh.s.timeout, err)
	}
	return found, err
}

// other returns the replica that is not r.
func (sh *show) other(r *replica) *replica {
	for _, o := range sh.replicas {
		if o != r {
			return o
		}
	}
	return nil
}

// release deletes the Websites left in the namespace, removing their finalizers so that
// they go without an operator: the namespace's deletion deletes the rest.
func (sh *show) release(ctx context.Context) error {
	list, err := sh.dyn.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range list.Items {
		_, err := sh.dyn.Patch(ctx, w.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if err == nil {
			err = sh.dyn.Delete(ctx, w.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("releasing Website %s: %w", w.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

func (sh *show) stopAll() error {
	var errs []error
	for _, r := range sh.replicas {
		errs = append(errs, r.stop())
	}
	return errors.Join(errs...)
}

// plural says n things.
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func header(title string) { fmt.Printf("\n▶ %s\n", title) }

func since(start time.Time) string { return fmt.Sprintf("+%-7s", round(time.Since(start))) }

// update changes an object, retrying on conflicts.
func update[T any](ctx context.Context, c interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}, name string, change func(T)) error {
	for {
		obj, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(obj)
		if _, err = c.Update(ctx, obj, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
}
