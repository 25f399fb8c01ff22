package perturb_test

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/consistency"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/perturb"
	"github.com/typedinformer/typedinformer/typed/predicate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logged is the test's context with the controllers' logs going to t.
func logged(t *testing.T) context.Context {
	return klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
}

// The seeded bugs' controllers are written as the examples are: a manager, a Builder
// for parents (ConfigMaps labelled role=parent) and children (Secrets), and a reconciler.
// Each has one bug of one of the three classes that systematic testing found in
// production operators.

const ns = "default"

// parentsOf wires a controller of parents that owns Secrets (when owns) and runs it.
func parentsOf(owns bool, preds []predicate.Predicate[*corev1.ConfigMap], r func(children *manager.Cache[*corev1.Secret], env perturb.Env) typed.ReconcilerFunc[*corev1.ConfigMap]) perturb.Controller {
	return func(ctx context.Context, env perturb.Env) error {
		m := manager.New(manager.Options{})
		b := manager.For(m, manager.Namespaced[*corev1.ConfigMap](env.Clientset.CoreV1().ConfigMaps), manager.CacheOptions[*corev1.ConfigMap]{Namespaces: []string{env.Namespace}}).
			WithKind(corev1.SchemeGroupVersion.WithKind("ConfigMap")).WithPredicates(preds...).WithOptions(typed.Options{Clock: env.Clock})
		var children *manager.Cache[*corev1.Secret]
		if owns {
			children = manager.Owns(b, manager.Namespaced[*corev1.Secret](env.Clientset.CoreV1().Secrets))
		}
		if _, err := b.Complete(r(children, env)); err != nil {
			return err
		}
		return m.Run(ctx)
	}
}

// childOf is a Secret a parent controls.
func childOf(p *corev1.ConfigMap) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, GenerateName: p.Name + "-", Labels: map[string]string{"parent": p.Name},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(p, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}}}
}

// createsWhenUnseen creates a parent's child when its cache shows none. Unguarded (ryw
// false), its create is unknown to read-your-writes, and a cache that lags makes it
// create a second child; guarded, it reports the create (consistency.Wrote), as the
// library's writers do.
func createsWhenUnseen(ryw bool) perturb.Controller {
	return parentsOf(true, nil, func(children *manager.Cache[*corev1.Secret], env perturb.Env) typed.ReconcilerFunc[*corev1.ConfigMap] {
		return func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if req.Deleted {
				return typed.Result{}, nil
			}
			for _, s := range children.InNamespace(req.Namespace) {
				if s.Labels["parent"] == req.Name {
					return typed.Result{}, nil
				}
			}
			created, err := env.Clientset.CoreV1().Secrets(req.Namespace).Create(ctx, childOf(req.Object), metav1.CreateOptions{})
			if err == nil && ryw {
				consistency.Wrote(ctx, created)
			}
			return typed.Result{}, err
		}
	})
}

// provisionsThenMarks creates a child and then marks the parent as provisioned: two
// writes, the first not idempotent. A crash between them makes the next process create
// a second child.
func provisionsThenMarks() perturb.Controller {
	return parentsOf(false, []predicate.Predicate[*corev1.ConfigMap]{predicate.GenerationChanged[*corev1.ConfigMap]}, func(_ *manager.Cache[*corev1.Secret], env perturb.Env) typed.ReconcilerFunc[*corev1.ConfigMap] {
		return func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			p := req.Object
			if req.Deleted || p.Annotations["provisioned"] != "" {
				return typed.Result{}, nil
			}
			child, err := env.Clientset.CoreV1().Secrets(p.Namespace).Create(ctx, childOf(p), metav1.CreateOptions{})
			if err != nil {
				return typed.Result{}, err
			}
			p = p.DeepCopy()
			p.Annotations = map[string]string{"provisioned": child.Name}
			_, err = env.Clientset.CoreV1().ConfigMaps(p.Namespace).Update(ctx, p, metav1.UpdateOptions{})
			return typed.Result{}, err
		}
	})
}

// recordsRestarts records a restart when it sees a parent in phase "restart": a state
// that lasts only until the user sets the phase back, and that a cache may never show.
func recordsRestarts() perturb.Controller {
	return parentsOf(false, nil, func(_ *manager.Cache[*corev1.Secret], env perturb.Env) typed.ReconcilerFunc[*corev1.ConfigMap] {
		return func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if req.Deleted || req.Object.Data["phase"] != "restart" {
				return typed.Result{}, nil
			}
			_, err := env.Clientset.CoreV1().Secrets(req.Namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
				Namespace: req.Namespace, Name: req.Name + "-restarted"}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
			return typed.Result{}, err
		}
	})
}

// setPhase is a step that sets the parent's phase, creating it first if need be.
func setPhase(phase string) perturb.Step {
	return perturb.Step{Name: "phase " + phase, Do: func(ctx context.Context, env perturb.Env) error {
		cms := env.Clientset.CoreV1().ConfigMaps(env.Namespace)
		p, err := cms.Get(ctx, "web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "web"}, Data: map[string]string{"phase": phase}}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		p.Data = map[string]string{"phase": phase}
		_, err = cms.Update(ctx, p, metav1.UpdateOptions{})
		return err
	}}
}

// scenario: a parent is created, changed twice, the second change undoing the first.
var scenario = []perturb.Step{setPhase("run"), setPhase("restart"), setPhase("run")}

// found checks that a Check of ctrl under classes finds failures, every one of class
// want, and that replaying the first one's seed fails alike: the same perturbation, a
// diff naming diffHas.
func found(t *testing.T, ctrl perturb.Controller, want perturb.Class, diffHas string, opts perturb.Options) perturb.Failure {
	t.Helper()
	opts.Classes = []perturb.Class{want}
	rep, err := perturb.Check(logged(t), ctrl, scenario, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) == 0 {
		t.Fatalf("no failure found in %d runs of %v (reference writes %q)", rep.Runs, want, rep.Writes)
	}
	first := rep.Failures[0]
	for _, f := range rep.Failures {
		if f.Class != want || f.Err != nil || !strings.Contains(f.Diff, diffHas) {
			t.Errorf("a failure of another kind than %v with a diff naming %q:\n%v", want, diffHas, f)
		}
	}
	// The seed fixes the perturbation exactly; how many reconciles the controller's
	// goroutines fit into a lag is the machine's, so a loaded machine may need a second
	// replay, and the number of duplicates may differ.
	opts.Replay = ptr.To(first.Seed)
	var again *perturb.Report
	for range 3 {
		if again, err = perturb.Check(logged(t), ctrl, scenario, opts); err != nil {
			t.Fatal(err)
		}
		if again.Runs == 1 && len(again.Failures) == 1 && again.Failures[0].Perturbation == first.Perturbation && strings.Contains(again.Failures[0].Diff, diffHas) {
			break
		}
	}
	if again.Runs != 1 || len(again.Failures) != 1 || again.Failures[0].Perturbation != first.Perturbation || !strings.Contains(again.Failures[0].Diff, diffHas) {
		t.Fatalf("replaying seed %d three times: %d runs, failures %v; want the same perturbation with a diff naming %q as\n%v", first.Seed, again.Runs, again.Failures, diffHas, first)
	}
	t.Logf("found and replayed: %v", first)
	return first
}

func TestFindsACreateRepeatedOnAStaleCache(t *testing.T) {
	f := found(t, createsWhenUnseen(false), perturb.Stale, "web-*#1", perturb.Options{Runs: 12})
	if f.Resource.Resource != "secrets" {
		t.Errorf("the lag that duplicated the child was of %v; only one of Secrets can", f.Resource)
	}
	t.Run("reporting the create to read-your-writes masks that lag", func(t *testing.T) {
		rep, err := perturb.Check(logged(t), createsWhenUnseen(true), scenario, perturb.Options{Replay: ptr.To(f.Seed)})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Runs != 1 || len(rep.Failures) != 0 {
			t.Errorf("guarded: %d runs, failures %v; want one run, none", rep.Runs, rep.Failures)
		}
	})
}

func TestFindsACrashBetweenTwoWrites(t *testing.T) {
	f := found(t, provisionsThenMarks(), perturb.Crash, "web-*#1", perturb.Options{})
	if f.Write != 1 || !strings.HasPrefix(f.WriteDesc, "create secrets default/web-") {
		t.Errorf("crash after write %d (%s); want after write 1, the child's create", f.Write, f.WriteDesc)
	}
}

func TestFindsAMissedTransientState(t *testing.T) {
	found(t, recordsRestarts(), perturb.Unobserved, "web-restarted", perturb.Options{Runs: 9})
}

// A correct controller: level-driven, idempotent, its writes through names it derives.
func TestNoFalseAlarmOnALevelDrivenController(t *testing.T) {
	ctrl := parentsOf(true, nil, func(children *manager.Cache[*corev1.Secret], env perturb.Env) typed.ReconcilerFunc[*corev1.ConfigMap] {
		return func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if req.Deleted {
				return typed.Result{}, nil
			}
			want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name + "-phase"},
				StringData: nil, Data: map[string][]byte{"phase": []byte(req.Object.Data["phase"])}}
			secrets := env.Clientset.CoreV1().Secrets(req.Namespace)
			cur, err := secrets.Get(ctx, want.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = secrets.Create(ctx, want, metav1.CreateOptions{})
			case err == nil && string(cur.Data["phase"]) != req.Object.Data["phase"]:
				cur.Data = want.Data
				_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
			}
			return typed.Result{}, err
		}
	})
	rep := perturb.Test(t, ctrl, scenario, perturb.Options{Runs: 15})
	if rep.Runs == 0 || len(rep.Writes) == 0 {
		t.Errorf("%d runs of %d writes: nothing was tried", rep.Runs, len(rep.Writes))
	}
}
