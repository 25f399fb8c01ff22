package perturb_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/perturb"
)

// idle is a controller that does nothing until it is stopped.
func idle(ctx context.Context, _ perturb.Env) error {
	<-ctx.Done()
	return nil
}

func step(name string, do func(ctx context.Context, env perturb.Env) error) perturb.Step {
	return perturb.Step{Name: name, Do: do}
}

var createWeb = step("create web", func(ctx context.Context, env perturb.Env) error {
	_, err := env.Clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{})
	return err
})

func TestRefusesBadInput(t *testing.T) {
	steps := []perturb.Step{createWeb}
	for name, call := range map[string]func() error{
		"a nil Controller": func() error { _, err := perturb.Check(logged(t), nil, steps, perturb.Options{}); return err },
		"no steps":         func() error { _, err := perturb.Check(logged(t), idle, nil, perturb.Options{}); return err },
		"a step without Do": func() error {
			_, err := perturb.Check(logged(t), idle, []perturb.Step{{Name: "nothing"}}, perturb.Options{})
			return err
		},
		"an unknown class": func() error {
			_, err := perturb.Check(logged(t), idle, steps, perturb.Options{Classes: []perturb.Class{7}})
			return err
		},
		"a negative budget": func() error {
			_, err := perturb.Check(logged(t), idle, steps, perturb.Options{Budget: -time.Second})
			return err
		},
		"a nil Definition": func() error {
			_, err := perturb.Check(logged(t), idle, steps, perturb.Options{Definitions: []*crd.Definition{nil}})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, perturb.ErrInvalid) {
				t.Errorf("error %v; want one wrapping ErrInvalid", err)
			}
		})
	}
}

func TestAReferenceRunThatFailsStopsTheCheck(t *testing.T) {
	t.Run("a step's error", func(t *testing.T) {
		boom := errors.New("boom")
		_, err := perturb.Check(logged(t), idle, []perturb.Step{step("fails", func(context.Context, perturb.Env) error { return boom })}, perturb.Options{})
		if !errors.Is(err, perturb.ErrReference) || !errors.Is(err, boom) || !strings.Contains(err.Error(), `step 0 (fails)`) {
			t.Errorf("error %v; want ErrReference wrapping the step's, naming it", err)
		}
	})
	t.Run("a controller that panics", func(t *testing.T) {
		_, err := perturb.Check(logged(t), func(context.Context, perturb.Env) error { panic("at the disco") }, []perturb.Step{createWeb}, perturb.Options{})
		if !errors.Is(err, perturb.ErrReference) || !errors.Is(err, perturb.ErrControllerPanic) || !strings.Contains(err.Error(), "at the disco") {
			t.Errorf("error %v; want ErrReference wrapping ErrControllerPanic with the panic's value", err)
		}
	})
	t.Run("a controller that returns at once", func(t *testing.T) {
		_, err := perturb.Check(logged(t), func(context.Context, perturb.Env) error { return nil }, []perturb.Step{createWeb}, perturb.Options{})
		if !errors.Is(err, perturb.ErrReference) || !errors.Is(err, perturb.ErrReturned) {
			t.Errorf("error %v; want ErrReference wrapping ErrReturned", err)
		}
	})
	t.Run("a controller that does not stop", func(t *testing.T) {
		release := make(chan struct{})
		stuck := func(context.Context, perturb.Env) error { <-release; return nil }
		_, err := perturb.Check(logged(t), stuck, []perturb.Step{createWeb}, perturb.Options{StepTimeout: 200 * time.Millisecond})
		close(release)
		if !errors.Is(err, perturb.ErrReference) || !errors.Is(err, perturb.ErrNoStop) {
			t.Errorf("error %v; want ErrReference wrapping ErrNoStop", err)
		}
	})
	t.Run("a controller that never settles", func(t *testing.T) {
		busy := func(ctx context.Context, env perturb.Env) error {
			for i := 0; ctx.Err() == nil; i++ {
				env.Clientset.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("s", i)}}, metav1.CreateOptions{})
				time.Sleep(10 * time.Millisecond)
			}
			return nil
		}
		_, err := perturb.Check(logged(t), busy, []perturb.Step{createWeb}, perturb.Options{StepTimeout: 500 * time.Millisecond})
		if !errors.Is(err, perturb.ErrReference) || !errors.Is(err, perturb.ErrNoSettle) {
			t.Errorf("error %v; want ErrReference wrapping ErrNoSettle", err)
		}
	})
}

// stamper writes, for the ConfigMap web, a Secret holding a value unique to its run.
func stamper(ctx context.Context, env perturb.Env) error {
	stamp := time.Now().String()
	for ctx.Err() == nil {
		if _, err := env.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "web", metav1.GetOptions{}); err == nil {
			_, err := env.Clientset.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "stamp"},
				StringData: map[string]string{"at": stamp}}, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-ctx.Done()
	return nil
}

func TestNondeterminismOfTheUnperturbedRunIsReportedNotBlamedOnPerturbations(t *testing.T) {
	_, err := perturb.Check(logged(t), stamper, []perturb.Step{createWeb}, perturb.Options{})
	if !errors.Is(err, perturb.ErrNondeterministic) || !strings.Contains(err.Error(), "stringData") {
		t.Fatalf("error %v; want ErrNondeterministic showing the field that differs", err)
	}
	rep, err := perturb.Check(logged(t), stamper, []perturb.Step{createWeb}, perturb.Options{
		Nondeterministic: [][]string{{"stringData", "at"}}, Classes: []perturb.Class{perturb.Crash}})
	if err != nil || len(rep.Writes) != 1 || rep.Runs != 1 || len(rep.Failures) != 0 {
		t.Errorf("with the field marked: %+v, %v; want one write, one crash run, no failure", rep, err)
	}
}

func TestTheBudgetBoundsTheRuns(t *testing.T) {
	t.Run("runs", func(t *testing.T) {
		rep, err := perturb.Check(logged(t), createsWhenUnseen(false), scenario, perturb.Options{Runs: 3, Quiet: 100 * time.Millisecond})
		if err != nil || rep.Runs != 3 {
			t.Errorf("Runs 3: %+v, %v; want 3 runs, one per class", rep, err)
		}
	})
	t.Run("time", func(t *testing.T) {
		rep, err := perturb.Check(logged(t), createsWhenUnseen(false), scenario, perturb.Options{Budget: time.Nanosecond, Quiet: 100 * time.Millisecond})
		if err != nil || rep.Runs != 0 || rep.Skipped == 0 {
			t.Errorf("a spent budget: %+v, %v; want no perturbed run, the plan skipped", rep, err)
		}
	})
}

// TestTheClusterServesWhatControllersRelyOn runs, as steps, the API server's behaviours
// that the in-memory cluster has and client-go's fake tracker has not.
func TestTheClusterServesWhatControllersRelyOn(t *testing.T) {
	cms := func(env perturb.Env) interface {
		Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
		Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
		Get(context.Context, string, metav1.GetOptions) (*corev1.ConfigMap, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
	} {
		return env.Clientset.CoreV1().ConfigMaps(ns)
	}
	checks := []perturb.Step{
		step("objects come back with a resource version, a UID and a creation time; an unchanged update writes nothing", func(ctx context.Context, env perturb.Env) error {
			c, err := cms(env).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
			if err != nil || c.ResourceVersion == "" || c.UID == "" || c.CreationTimestamp.IsZero() {
				return fmt.Errorf("created %+v, %v", c.ObjectMeta, err)
			}
			same, err := cms(env).Update(ctx, c, metav1.UpdateOptions{})
			if err != nil || same.ResourceVersion != c.ResourceVersion {
				return fmt.Errorf("an unchanged update: %v, resource version %s then %s", err, c.ResourceVersion, same.ResourceVersion)
			}
			return nil
		}),
		step("an update from a stale read conflicts", func(ctx context.Context, env perturb.Env) error {
			c, _ := cms(env).Get(ctx, "a", metav1.GetOptions{})
			c.Data = map[string]string{"v": "1"}
			if _, err := cms(env).Update(ctx, c, metav1.UpdateOptions{}); err != nil {
				return err
			}
			c.Data = map[string]string{"v": "2"}
			if _, err := cms(env).Update(ctx, c, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
				return fmt.Errorf("stale update: %v; want a conflict", err)
			}
			return nil
		}),
		step("a deletion's UID precondition is checked", func(ctx context.Context, env perturb.Env) error {
			other := types.UID("another")
			if err := cms(env).Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &other}}); !apierrors.IsConflict(err) {
				return fmt.Errorf("delete with another UID: %v; want a conflict", err)
			}
			return nil
		}),
		step("generateName names; finalizers hold a deletion until removed, and the deletion bumps the generation", func(ctx context.Context, env perturb.Env) error {
			c, err := cms(env).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-", Finalizers: []string{"x/y"}}}, metav1.CreateOptions{})
			if err != nil || !strings.HasPrefix(c.Name, "gen-") || len(c.Name) <= len("gen-") {
				return fmt.Errorf("generateName: %q, %v", c.Name, err)
			}
			if err := cms(env).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			held, err := cms(env).Get(ctx, c.Name, metav1.GetOptions{})
			if err != nil || held.DeletionTimestamp == nil || held.Generation != c.Generation+1 {
				return fmt.Errorf("deleted with a finalizer: %+v, %v; want it held, marked, its generation bumped", held.ObjectMeta, err)
			}
			held.Finalizers = nil
			if _, err := cms(env).Update(ctx, held, metav1.UpdateOptions{}); err != nil {
				return err
			}
			if _, err := cms(env).Get(ctx, c.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("its last finalizer removed: %v; want it gone", err)
			}
			return nil
		}),
		step("the status subresource and the object are written apart", func(ctx context.Context, env perturb.Env) error {
			pods := env.Clientset.CoreV1().Pods(ns)
			p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: "n1"},
				Status: corev1.PodStatus{Phase: corev1.PodPending}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			p.Status.Phase, p.Spec.NodeName = corev1.PodRunning, "n2"
			p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning || p.Spec.NodeName != "n1" || p.Generation != 1 {
				return fmt.Errorf("status update: %v, %+v; want the phase written, the spec and generation kept", err, p)
			}
			p.Status.Phase, p.Spec.NodeName = corev1.PodFailed, "n3"
			p, err = pods.Update(ctx, p, metav1.UpdateOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning || p.Spec.NodeName != "n3" || p.Generation != 2 {
				return fmt.Errorf("update: %v, %+v; want the spec written and its generation bumped, the status kept", err, p)
			}
			return nil
		}),
	}
	if _, err := perturb.Check(logged(t), idle, checks, perturb.Options{Quiet: 50 * time.Millisecond, Runs: 1}); err != nil {
		t.Fatal(err)
	}
}

func TestAPerturbationWhoseWriteNeverCameIsSaidToBe(t *testing.T) {
	var calls atomic.Int32
	// Writes in the two unperturbed runs only: the crash run never sees its write 1.
	fickle := func(ctx context.Context, env perturb.Env) error {
		if calls.Add(1) <= 2 {
			if _, err := env.Clientset.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		<-ctx.Done()
		return nil
	}
	rep, err := perturb.Check(logged(t), fickle, []perturb.Step{createWeb}, perturb.Options{Classes: []perturb.Class{perturb.Crash}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) != 1 || !rep.Failures[0].NotReached || !strings.Contains(rep.Failures[0].String(), "write 1 never came") {
		t.Errorf("failures %v; want one, saying its write never came", rep.Failures)
	}
}
