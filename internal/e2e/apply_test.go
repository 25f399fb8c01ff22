package e2e

// Server-side apply through package write against a real kube-apiserver: two field
// managers sharing a Deployment, typed conflicts, status applies of a built-in kind and
// of a custom resource's Go struct, and create-only owned objects with a lagging cache.

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv1ac "k8s.io/client-go/applyconfigurations/autoscaling/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/testenv"
	"github.com/typedinformer/typedinformer/typed/write"
)

// operatorFieldManager is the field manager a manager.Manager would put in the context.
const operatorFieldManager = "website-operator"

// emptyCache is a cache that has seen nothing yet: a cache lagging the server.
type emptyCache[T any] struct{}

func (emptyCache[T]) GetByName(string, string) (T, bool) {
	var zero T
	return zero, false
}

// staleCache holds one object as it was before another owner took it.
type staleCache[T any] struct{ obj T }

func (c staleCache[T]) GetByName(string, string) (T, bool) { return c.obj, true }

// managedFieldsOf returns, per "manager[/subresource]", the fields it owns (fieldsV1 as
// JSON).
func managedFieldsOf(obj metav1.Object) map[string]string {
	out := map[string]string{}
	for _, e := range obj.GetManagedFields() {
		key := e.Manager
		if e.Subresource != "" {
			key += "/" + e.Subresource
		}
		if e.FieldsV1 != nil {
			out[key] += string(e.FieldsV1.Raw)
		}
	}
	return out
}

// owns reports whether the fieldsV1 JSON of a manager has the field path (f:spec, f:replicas).
func owns(fields string, path ...string) bool {
	var m map[string]any
	if json.Unmarshal([]byte(fields), &m) != nil {
		return false
	}
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			return false
		}
		m = next
	}
	return true
}

func TestServerSideApply(t *testing.T) {
	checkLeaksAtEnd(t)
	cp := testenv.Start(t, testenv.Options{Definitions: []*crd.Definition{website.Definition()}})
	admin := newClients(t, cp.AdminConfig())
	const ns = "apply"
	createNamespaces(t, admin.kube, ns)
	ctx := write.WithFieldManager(timeout(t), operatorFieldManager)

	websites := client.FromDynamicNamespaced[*website.Website](admin.dyn.Resource(website.Resource))
	// The Website is applied from its Go struct, with only what the operator's user sets.
	owner, err := write.NewApplier(websites).WithFieldManager("user").Apply(ctx, &website.Website{
		TypeMeta:   metav1.TypeMeta{APIVersion: website.Kind.GroupVersion().String(), Kind: website.Kind.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"},
		Spec:       website.WebsiteSpec{Message: "hello", Replicas: 2},
	})
	if err != nil {
		t.Fatalf("applying the Website from its Go struct: %v", err)
	}

	t.Run("a Go struct's unset fields are not claimed", func(t *testing.T) {
		user := managedFieldsOf(owner)["user"]
		if !owns(user, "f:spec", "f:message") || !owns(user, "f:spec", "f:replicas") {
			t.Errorf("the user does not own the spec fields set: %s", user)
		}
		for _, unset := range [][]string{{"f:status"}, {"f:metadata", "f:labels"}, {"f:metadata", "f:annotations"}, {"f:metadata", "f:creationTimestamp"}} {
			if owns(user, unset...) {
				t.Errorf("the user owns %v, which the struct left unset: %s", unset, user)
			}
		}
	})

	deployments := write.NewOwnedApplier[*website.Website](admin.kube.AppsV1().Deployments, website.Kind)
	labels := map[string]string{"website": "shop"}
	web := func(image string) *appsv1ac.DeploymentApplyConfiguration {
		return appsv1ac.Deployment("shop", ns).WithLabels(labels).WithSpec(appsv1ac.DeploymentSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().
				WithContainers(corev1ac.Container().WithName("web").WithImage(image)))))
	}
	// The other manager applies the replicas alone: an autoscaler, or a person's kubectl apply.
	scaler := write.NewApplier(admin.kube.AppsV1().Deployments).WithFieldManager("scaler")
	scale := func(replicas int32) {
		t.Helper()
		if _, err := scaler.Apply(ctx, appsv1ac.Deployment("shop", ns).WithSpec(appsv1ac.DeploymentSpec().WithReplicas(replicas))); err != nil {
			t.Fatalf("scaling: %v", err)
		}
	}

	t.Run("two field managers co-own a Deployment and neither reverts the other", func(t *testing.T) {
		for round := range 4 {
			image := fmt.Sprintf("nginx:1.%d", round)
			if _, err := deployments.Apply(ctx, owner, web(image)); err != nil {
				t.Fatalf("round %d: the operator's apply: %v", round, err)
			}
			scale(int32(round + 2))
			d, err := deployments.Apply(ctx, owner, web(image)) // again, after the scaler
			if err != nil {
				t.Fatalf("round %d: the operator's apply after the scaler's: %v", round, err)
			}
			if got := ptr.Deref(d.Spec.Replicas, -1); got != int32(round+2) {
				t.Errorf("round %d: the operator's apply reverted replicas to %d, want the scaler's %d", round, got, round+2)
			}
			if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
				t.Errorf("round %d: image %q, want the operator's %q", round, got, image)
			}
			if ref := metav1.GetControllerOf(d); ref == nil || ref.UID != owner.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
				t.Errorf("round %d: controller reference %+v, want the Website's, blocking its deletion", round, ref)
			}
		}
		d, err := admin.kube.AppsV1().Deployments(ns).Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fields := managedFieldsOf(d)
		if op := fields[operatorFieldManager]; owns(op, "f:spec", "f:replicas") || !owns(op, "f:spec", "f:template", "f:spec", "f:containers") {
			t.Errorf("the operator owns %s; want the template and not the replicas", op)
		}
		if sc := fields["scaler"]; !owns(sc, "f:spec", "f:replicas") {
			t.Errorf("the scaler owns %s; want the replicas (%v)", sc, fields)
		}
	})

	t.Run("a conflicting apply is a typed error naming the field and its manager; force takes it", func(t *testing.T) {
		taking := web("nginx:1.3")
		taking.Spec.WithReplicas(7)
		_, err := deployments.Apply(ctx, owner, taking)
		var conflict *write.ApplyConflictError
		if !errors.As(err, &conflict) || !errors.Is(err, write.ErrApplyConflict) || !apierrors.IsConflict(err) {
			t.Fatalf("got %v, want an *ApplyConflictError", err)
		}
		if len(conflict.Conflicts) != 1 || conflict.Conflicts[0].Field != ".spec.replicas" || conflict.Conflicts[0].Manager != "scaler" {
			t.Errorf("conflicts %+v, want .spec.replicas owned by scaler", conflict.Conflicts)
		}
		t.Logf("the conflict: %v", err)
		d, err := deployments.WithForce(true).Apply(ctx, owner, taking)
		if err != nil {
			t.Fatalf("a forced apply: %v", err)
		}
		if got := ptr.Deref(d.Spec.Replicas, -1); got != 7 {
			t.Errorf("replicas %d after a forced apply, want 7", got)
		}
		if op := managedFieldsOf(d)[operatorFieldManager]; !owns(op, "f:spec", "f:replicas") {
			t.Errorf("the operator does not own the replicas it forced: %s", op)
		}
	})

	t.Run("a manager scaling through the scale subresource keeps its replicas; a conflict names its subresource", func(t *testing.T) {
		scaled := func(image string) *appsv1ac.DeploymentApplyConfiguration {
			d := web(image)
			d.WithName("scaled")
			return d
		}
		for round := range 3 {
			if _, err := deployments.Apply(ctx, owner, scaled("nginx:2")); err != nil {
				t.Fatalf("round %d: the operator's apply: %v", round, err)
			}
			if _, err := admin.kube.AppsV1().Deployments(ns).ApplyScale(ctx, "scaled", autoscalingv1ac.Scale().WithSpec(autoscalingv1ac.ScaleSpec().WithReplicas(int32(round+3))),
				metav1.ApplyOptions{FieldManager: "hpa", Force: true}); err != nil {
				t.Fatalf("round %d: scaling: %v", round, err)
			}
			d, err := deployments.Apply(ctx, owner, scaled("nginx:2"))
			if err != nil {
				t.Fatalf("round %d: the operator's apply after the scale: %v", round, err)
			}
			if got := ptr.Deref(d.Spec.Replicas, -1); got != int32(round+3) {
				t.Errorf("round %d: replicas %d, want the scale's %d", round, got, round+3)
			}
		}
		d, err := admin.kube.AppsV1().Deployments(ns).Get(ctx, "scaled", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if hpa := managedFieldsOf(d)["hpa/scale"]; !owns(hpa, "f:spec", "f:replicas") {
			t.Errorf("the scale's manager owns %s; want the replicas (%v)", hpa, managedFieldsOf(d))
		}
		taking := scaled("nginx:2")
		taking.Spec.WithReplicas(1)
		_, err = deployments.Apply(ctx, owner, taking)
		var conflict *write.ApplyConflictError
		if !errors.As(err, &conflict) || len(conflict.Conflicts) != 1 || conflict.Conflicts[0].Manager != "hpa" || conflict.Conflicts[0].Subresource != "scale" {
			t.Errorf("got %v, want a conflict with hpa through the scale subresource", err)
		}
		t.Logf("the conflict: %v", err)
	})

	t.Run("an apply that changes nothing writes nothing", func(t *testing.T) {
		first, err := deployments.Apply(ctx, owner, web("nginx:1.3"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := deployments.Apply(ctx, owner, web("nginx:1.3"))
		if err != nil {
			t.Fatal(err)
		}
		if again.ResourceVersion != first.ResourceVersion {
			t.Errorf("a repeated apply wrote: resource version %s, then %s", first.ResourceVersion, again.ResourceVersion)
		}
	})

	t.Run("an object another owner controls is never applied to", func(t *testing.T) {
		other := &website.Website{TypeMeta: owner.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other", UID: "uid-of-another"}}
		before, err := admin.kube.AppsV1().Deployments(ns).Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, cache := range map[string]write.CacheReader[*appsv1.Deployment]{
			// The cache has not seen the Deployment: it is read from the server.
			"absent from the cache": emptyCache[*appsv1.Deployment]{},
			// The cache shows it with no controller: the server refuses a second one.
			"stale in the cache": staleCache[*appsv1.Deployment]{&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop", ResourceVersion: "1"}}},
		} {
			_, err := deployments.WithCache(cache).Apply(ctx, other, web("nginx:9"))
			var conflict *write.OwnerConflictError
			if !errors.As(err, &conflict) || conflict.Controller.UID != owner.UID {
				t.Errorf("%s: got %v, want an OwnerConflictError naming the Website", name, err)
			}
		}
		after, err := admin.kube.AppsV1().Deployments(ns).Get(ctx, "shop", metav1.GetOptions{})
		if err != nil || after.ResourceVersion != before.ResourceVersion {
			t.Errorf("the Deployment was written (resource version %s, then %s; %v)", before.ResourceVersion, after.ResourceVersion, err)
		}
	})

	t.Run("status apply of a built-in kind", func(t *testing.T) {
		status := write.NewStatusApplier(admin.kube.AppsV1().Deployments)
		d, err := status.Apply(ctx, appsv1ac.Deployment("shop", ns).WithStatus(appsv1ac.DeploymentStatus().
			WithObservedGeneration(4).WithConditions(appsv1ac.DeploymentCondition().
			WithType(appsv1.DeploymentAvailable).WithStatus(corev1.ConditionFalse).WithReason("Testing"))))
		if err != nil {
			t.Fatal(err)
		}
		if d.Status.ObservedGeneration != 4 || len(d.Status.Conditions) != 1 {
			t.Errorf("status %+v after the apply", d.Status)
		}
		if st := managedFieldsOf(d)[operatorFieldManager+"/status"]; !owns(st, "f:status", "f:observedGeneration") {
			t.Errorf("the operator's status fields: %s", st)
		}
	})

	t.Run("status apply of a custom resource's Go struct", func(t *testing.T) {
		w, err := write.NewStatusApplier(websites).Apply(ctx, &website.Website{TypeMeta: owner.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"},
			Status:     website.WebsiteStatus{ObservedGeneration: owner.Generation, ReadyReplicas: 2}})
		if err != nil {
			t.Fatal(err)
		}
		if w.Status.ReadyReplicas != 2 || w.Spec.Message != "hello" || w.Spec.Replicas != 2 {
			t.Errorf("after the status apply: spec %+v, status %+v", w.Spec, w.Status)
		}
		st := managedFieldsOf(w)[operatorFieldManager+"/status"]
		if !owns(st, "f:status", "f:readyReplicas") || owns(st, "f:spec") || owns(st, "f:status", "f:conditions") {
			t.Errorf("the operator's status fields: %s", st)
		}
	})

	t.Run("create-only with a lagging cache: no error, no second object, never an update", func(t *testing.T) {
		jobs := write.NewOwned[*website.Website](admin.kube.BatchV1().Jobs, website.Kind).WithCache(emptyCache[*batchv1.Job]{})
		build := func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
			j.Spec.Template.Spec.Containers = []corev1.Container{{Name: "migrate", Image: "busybox"}}
		}
		created, change, err := jobs.CreateOnly(ctx, owner, ns, "migrate", build)
		if err != nil || change != write.Created {
			t.Fatalf("the first CreateOnly: %q, %v", change, err)
		}
		for range 3 { // the cache still lags
			found, change, err := jobs.CreateOnly(ctx, owner, ns, "migrate", func(j *batchv1.Job) {
				build(j)
				j.Spec.Template.Spec.Containers[0].Image = "busybox:changed" // never applied: specs are immutable
			})
			if err != nil || change != write.Unchanged {
				t.Fatalf("CreateOnly with the object on the server and not in the cache: %q, %v", change, err)
			}
			if found.UID != created.UID || found.Spec.Template.Spec.Containers[0].Image != "busybox" {
				t.Errorf("found %s (image %s), want the object created", found.UID, found.Spec.Template.Spec.Containers[0].Image)
			}
		}
		list, err := admin.kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("%d jobs (%v), want 1", len(list.Items), err)
		}
		if list.Items[0].Generation != 1 {
			t.Errorf("the job has generation %d: it was updated", list.Items[0].Generation)
		}
	})
}
