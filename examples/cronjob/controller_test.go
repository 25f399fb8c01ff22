//go:build unix

package cronjob_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/cronjob"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// TestCronJobController runs the controller against a real kube-apiserver and etcd
// (typed/testenv), one namespace and one controller per behaviour, on a fake clock the
// test steps from one scheduled time to the next. No kube-controller-manager runs: Jobs
// never run, so a test finishes one by writing its status conditions, and no garbage
// collector deletes anything.
func TestCronJobController(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Definitions: []*crd.Definition{cronjob.Definition()}})
	cs := kubernetes.NewForConfigOrDie(env.AdminConfig())
	dyn := dynamic.NewForConfigOrDie(env.AdminConfig())
	every := func(c *cronjob.CronJob) { c.Spec.Schedule = "* * * * *" }

	t.Run("a CronJob every minute creates exactly one Job per scheduled time, and reports it", func(t *testing.T) {
		h := start(t, cs, dyn)
		first := h.create(t, "tick", every)
		h.step(t, first)
		h.jobs(t, "tick", first)
		h.status(t, "tick", first, first)
		h.step(t, first.Add(time.Minute))
		h.jobs(t, "tick", first, first.Add(time.Minute))
		h.status(t, "tick", first.Add(time.Minute), first, first.Add(time.Minute))
		// Three schedules go by while it is away: only the latest is started.
		h.step(t, first.Add(4*time.Minute))
		h.jobs(t, "tick", first, first.Add(time.Minute), first.Add(4*time.Minute))
		// Each Job is the template's, controlled by the CronJob, with its scheduled time.
		j := h.job(t, "tick", first)
		cj := h.cronJob(t, "tick")
		if ref := metav1.GetControllerOf(j); ref == nil || ref.UID != cj.UID || ref.Kind != "CronJob" {
			t.Errorf("Job %s's controller = %+v; want CronJob tick (%s)", j.Name, ref, cj.UID)
		}
		if got := j.Annotations[cronjob.ScheduledTimeAnnotation]; got != first.UTC().Format(time.RFC3339) {
			t.Errorf("Job %s scheduled at %q; want %s", j.Name, got, first.UTC().Format(time.RFC3339))
		}
		if got := j.Spec.Template.Spec.Containers[0].Image; got != "busybox" || j.Spec.Template.Labels["app"] != "hello" {
			t.Errorf("Job %s: image %q, labels %v; want the template's busybox, app=hello", j.Name, got, j.Spec.Template.Labels)
		}
	})

	t.Run("two controllers at once (a leader hand-over) create one Job per schedule, and neither fails", func(t *testing.T) {
		h := start(t, cs, dyn)
		h.run(t) // the second, without leader election: both reconcile every key
		first := h.create(t, "twice", every)
		var started []time.Time
		for i := range 3 {
			h.step(t, first.Add(time.Duration(i)*time.Minute))
			started = append(started, first.Add(time.Duration(i)*time.Minute))
			h.jobs(t, "twice", started...)
		}
		h.status(t, "twice", first.Add(2*time.Minute), first, first.Add(time.Minute), first.Add(2*time.Minute))
	})

	t.Run("Forbid starts nothing while a Job is active; once it finished, the run held back starts", func(t *testing.T) {
		h := start(t, cs, dyn)
		first := h.create(t, "one", every, func(c *cronjob.CronJob) { c.Spec.ConcurrencyPolicy = cronjob.ForbidConcurrent })
		h.step(t, first)
		h.jobs(t, "one", first)
		second := first.Add(time.Minute)
		h.step(t, second)
		h.stillJobs(t, "one", first)
		h.finish(t, "one", first, batchv1.JobComplete)
		h.jobs(t, "one", first, second)
		h.status(t, "one", second, second)
	})

	t.Run("Replace deletes the active Job and starts the new one", func(t *testing.T) {
		h := start(t, cs, dyn)
		first := h.create(t, "swap", every, func(c *cronjob.CronJob) { c.Spec.ConcurrencyPolicy = cronjob.ReplaceConcurrent })
		h.step(t, first)
		h.jobs(t, "swap", first)
		second := first.Add(time.Minute)
		h.step(t, second)
		h.jobs(t, "swap", second)
		h.status(t, "swap", second, second)
	})

	t.Run("a suspended CronJob creates nothing", func(t *testing.T) {
		h := start(t, cs, dyn)
		first := h.create(t, "paused", every, func(c *cronjob.CronJob) { c.Spec.Suspend = ptr.To(true) })
		h.step(t, first)
		h.step(t, first.Add(time.Minute))
		h.stillJobs(t, "paused")
		if got := h.cronJob(t, "paused").Status; got.LastScheduleTime != nil || len(got.Active) != 0 {
			t.Errorf("status %+v; want nothing scheduled, nothing active", got)
		}
	})

	t.Run("history limits delete the oldest finished Jobs, successful and failed apart", func(t *testing.T) {
		h := start(t, cs, dyn)
		first := h.create(t, "hist", every, func(c *cronjob.CronJob) {
			c.Spec.SuccessfulJobsHistoryLimit, c.Spec.FailedJobsHistoryLimit = ptr.To[int32](1), ptr.To[int32](1)
		})
		at := func(i int) time.Time { return first.Add(time.Duration(i) * time.Minute) }
		var started []time.Time
		for i := range 4 {
			h.step(t, at(i))
			started = append(started, at(i))
			h.jobs(t, "hist", started...)
		}
		h.finish(t, "hist", at(0), batchv1.JobComplete)
		h.finish(t, "hist", at(1), batchv1.JobComplete)
		h.finish(t, "hist", at(2), batchv1.JobFailed)
		h.jobs(t, "hist", at(1), at(2), at(3)) // the older of two successful Jobs deleted; one failed is kept
		h.finish(t, "hist", at(3), batchv1.JobFailed)
		h.jobs(t, "hist", at(1), at(3))
		h.status(t, "hist", at(3)) // none active
	})

	t.Run("a run missed by more than the starting deadline is skipped; the next one on time starts", func(t *testing.T) {
		h := start(t, cs, dyn)
		first := h.create(t, "late", every, func(c *cronjob.CronJob) { c.Spec.StartingDeadlineSeconds = ptr.To[int64](10) })
		h.step(t, first.Add(30*time.Second)) // the controller was away when first came
		h.stillJobs(t, "late")
		second := first.Add(time.Minute)
		h.step(t, second)
		h.jobs(t, "late", second)
	})
}

// harness runs one controller on a fake clock in a namespace of its own.
type harness struct {
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	ns    string
	clock *clocktesting.FakeClock
	pokes int // the touches of the CronJob
	late  int // the touches because a requeue came a step late
}

func start(t *testing.T, cs kubernetes.Interface, dyn dynamic.Interface) *harness {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cronjob-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{cs: cs, dyn: dyn, ns: ns.Name, clock: clocktesting.NewFakeClock(time.Now())}
	h.run(t)
	t.Cleanup(func() {
		if h.late > 0 {
			t.Logf("touched the CronJob %d times because a requeue timer was set after the clock stepped", h.late)
		}
	})
	return h
}

// run runs a controller in h's namespace on h's clock until the test ends.
func (h *harness) run(t *testing.T) {
	t.Helper()
	// A reconcile error fails the test: a create that finds its Job already there
	// (the Jobs cache not showing it yet) is not one.
	c, err := cronjob.New(h.cs, h.dyn, cronjob.Options{Namespace: h.ns, Clock: h.clock, OnError: func(_ context.Context, key string, err error) {
		t.Errorf("reconciling %s: %v", key, err)
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the controller's Run: %v", err)
		}
	})
}

// create creates the tutorial's sample CronJob named name, changed as changes say, once
// the controller has started, and returns its first scheduled time.
func (h *harness) create(t *testing.T, name string, changes ...func(*cronjob.CronJob)) time.Time {
	t.Helper()
	c := valid(name)
	c.Namespace = h.ns
	for _, change := range changes {
		change(c)
	}
	got, err := client.FromDynamicNamespaced[*cronjob.CronJob](h.dyn.Resource(cronjob.Resource))(h.ns).Create(context.Background(), c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := cronjob.ParseSchedule(c.Spec.Schedule)
	if err != nil {
		t.Fatal(err)
	}
	h.settled(t)
	return sched.Next(got.CreationTimestamp.Time)
}

// step sets the clock to at and waits until the controller has reconciled at that time:
// the requeue timer that fired has been set again.
func (h *harness) step(t *testing.T, at time.Time) {
	t.Helper()
	h.clock.SetTime(at)
	h.settled(t)
}

// settled waits until the controller has registered its requeue at the next schedule.
func (h *harness) settled(t *testing.T) {
	t.Helper()
	eventually(t, "a requeue at the next schedule", func() (bool, string) {
		return h.clock.HasWaiters(), "no timer on the fake clock"
	})
}

// jobs waits until the CronJob's Jobs are exactly those of the scheduled times want. A
// requeue timer set from a reading of the clock just before a step fires a step late (a
// reconcile's RequeueAfter is relative): when the Jobs are not there after a while, the
// CronJob is touched to be reconciled at the clock's time.
func (h *harness) jobs(t *testing.T, name string, want ...time.Time) {
	t.Helper()
	wanted := jobNames(name, want...)
	since := time.Now()
	eventually(t, fmt.Sprintf("Jobs %v", wanted), func() (bool, string) {
		got := h.jobNames(t)
		if !slices.Equal(got, wanted) && time.Since(since) > 3*time.Second {
			h.poke(t, name)
			h.late++
			since = time.Now()
		}
		return slices.Equal(got, wanted), fmt.Sprintf("Jobs %v", got)
	})
}

// stillJobs checks that the Jobs are those of want once the controller settled, and
// stay so for a second of reconciles.
func (h *harness) stillJobs(t *testing.T, name string, want ...time.Time) {
	t.Helper()
	wanted := jobNames(name, want...)
	h.settled(t)
	h.poke(t, name)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got := h.jobNames(t); !slices.Equal(got, wanted) {
			t.Fatalf("Jobs %v; want %v", got, wanted)
		}
	}
}

func jobNames(name string, times ...time.Time) []string {
	names := []string{}
	for _, at := range times {
		names = append(names, fmt.Sprintf("%s-%d", name, at.Unix()))
	}
	slices.Sort(names)
	return names
}

func (h *harness) jobNames(t *testing.T) []string {
	t.Helper()
	list, err := h.cs.BatchV1().Jobs(h.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, j := range list.Items {
		names = append(names, j.Name)
	}
	slices.Sort(names)
	return names
}

func (h *harness) job(t *testing.T, name string, at time.Time) *batchv1.Job {
	t.Helper()
	j, err := h.cs.BatchV1().Jobs(h.ns).Get(context.Background(), jobNames(name, at)[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (h *harness) cronJob(t *testing.T, name string) *cronjob.CronJob {
	t.Helper()
	c, err := client.FromDynamicNamespaced[*cronjob.CronJob](h.dyn.Resource(cronjob.Resource))(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// status waits until the CronJob's status says it was last scheduled at last, with the
// Jobs of the times active running.
func (h *harness) status(t *testing.T, name string, last time.Time, active ...time.Time) {
	t.Helper()
	want := fmt.Sprint(last.UTC().Format(time.RFC3339), " ", jobNames(name, active...))
	eventually(t, "status "+want, func() (bool, string) {
		s := h.cronJob(t, name).Status
		names := []string{}
		for _, ref := range s.Active {
			names = append(names, ref.Name)
		}
		slices.Sort(names)
		var lst string
		if s.LastScheduleTime != nil {
			lst = s.LastScheduleTime.UTC().Format(time.RFC3339)
		}
		got := fmt.Sprint(lst, " ", names)
		return got == want, "status " + got
	})
}

// finish writes what the job controller would once the Job of the scheduled time at
// finished with cond (JobComplete or JobFailed).
func (h *harness) finish(t *testing.T, name string, at time.Time, cond batchv1.JobConditionType) {
	t.Helper()
	j := h.job(t, name, at)
	now := metav1.Now()
	j.Status.StartTime = &now
	condition := func(c batchv1.JobConditionType) batchv1.JobCondition {
		return batchv1.JobCondition{Type: c, Status: corev1.ConditionTrue, Reason: "ByTheTest", LastProbeTime: now, LastTransitionTime: now}
	}
	if cond == batchv1.JobComplete {
		j.Status.CompletionTime, j.Status.Succeeded = &now, 1
		j.Status.Conditions = []batchv1.JobCondition{condition(batchv1.JobSuccessCriteriaMet), condition(batchv1.JobComplete)}
	} else {
		j.Status.Failed = 1
		j.Status.Conditions = []batchv1.JobCondition{condition(batchv1.JobFailureTarget), condition(batchv1.JobFailed)}
	}
	if _, err := h.cs.BatchV1().Jobs(h.ns).UpdateStatus(context.Background(), j, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("finishing Job %s: %v", j.Name, err)
	}
}

// poke touches the CronJob, which reconciles it at the clock's time.
func (h *harness) poke(t *testing.T, name string) {
	t.Helper()
	h.pokes++
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.typedinformer.io/poke":"%d"}}}`, h.pokes)
	if _, err := h.dyn.Resource(cronjob.Resource).Namespace(h.ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

const waitTimeout = 60 * time.Second

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
		t.Fatalf("%s: not within %s: %s", what, waitTimeout, strings.TrimSpace(last))
	}
}
