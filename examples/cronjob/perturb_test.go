package cronjob_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/cronjob"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/perturb"
)

// TestCronJobControllerUnderPerturbation runs a CronJob every minute through three
// scheduled times, its Jobs finishing, and a history limit of one, unperturbed and then
// crashed after each of the controller's writes, with lagging caches and with missed
// intermediate states: every run ends with the same Jobs and the same status.
func TestCronJobControllerUnderPerturbation(t *testing.T) {
	controller := func(ctx context.Context, env perturb.Env) error {
		c, err := cronjob.New(env.Clientset, env.Dynamic, cronjob.Options{Namespace: "default", Clock: env.Clock})
		if err != nil {
			return err
		}
		return c.Run(ctx)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	minute := func(i int) time.Time { return start.Add(time.Duration(i) * time.Minute) }
	// at moves the clock to minute i once the Job of the minute before has started: a
	// controller held back for a whole minute (its key waiting for a lagging cache)
	// rightly starts only the latest missed schedule, and the scenario is one in which
	// none is missed.
	at := func(i int) perturb.Step {
		return perturb.Step{Name: fmt.Sprintf("the clock at minute %d", i), Do: func(ctx context.Context, env perturb.Env) error {
			if i > 1 {
				err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
					_, err := env.Clientset.BatchV1().Jobs("default").Get(ctx, fmt.Sprintf("tick-%d", minute(i-1).Unix()), metav1.GetOptions{})
					return err == nil, nil
				})
				if err != nil {
					return fmt.Errorf("the Job of minute %d did not start: %w", i-1, err)
				}
			}
			env.Clock.SetTime(minute(i))
			return nil
		}}
	}
	// finish stands for the Job controller: the Job of minute i completes.
	finish := func(i int) perturb.Step {
		return perturb.Step{Name: fmt.Sprintf("the Job of minute %d completes", i), Do: func(ctx context.Context, env perturb.Env) error {
			jobs := env.Clientset.BatchV1().Jobs("default")
			j, err := jobs.Get(ctx, fmt.Sprintf("tick-%d", minute(i).Unix()), metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.NewTime(env.Clock.Now())
			j.Status.StartTime, j.Status.CompletionTime, j.Status.Succeeded = &now, &now, 1
			for _, c := range []batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete} {
				j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: c, Status: corev1.ConditionTrue, Reason: "ByTheTest", LastProbeTime: now, LastTransitionTime: now})
			}
			_, err = jobs.UpdateStatus(ctx, j, metav1.UpdateOptions{})
			return err
		}}
	}
	steps := []perturb.Step{
		{Name: "create tick", Do: func(ctx context.Context, env perturb.Env) error {
			_, err := client.FromDynamicNamespaced[*cronjob.CronJob](env.Dynamic.Resource(cronjob.Resource))("default").Create(ctx, &cronjob.CronJob{
				TypeMeta:   metav1.TypeMeta{APIVersion: cronjob.Kind.GroupVersion().String(), Kind: cronjob.Kind.Kind},
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tick"},
				Spec: cronjob.CronJobSpec{Schedule: "* * * * *", SuccessfulJobsHistoryLimit: ptr.To[int32](1),
					JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{{Name: "hello", Image: "busybox"}}}}}}},
			}, metav1.CreateOptions{})
			return err
		}},
		at(1), at(2), finish(1), at(3), finish(2),
	}
	rep := perturb.Test(t, controller, steps, perturb.Options{
		Definitions: []*crd.Definition{cronjob.Definition()}, Start: start, Runs: 24, Budget: time.Minute,
		// The status lists the active Jobs with their UIDs and resource versions: the
		// server's, which runs of different writes number differently.
		Nondeterministic: [][]string{{"status", "active", "uid"}, {"status", "active", "resourceVersion"}},
	})
	if rep != nil && (rep.Runs == 0 || len(rep.Writes) < 6) {
		t.Errorf("%d perturbed runs of a reference with writes %q: the scenario did not exercise the controller", rep.Runs, rep.Writes)
	}
}
