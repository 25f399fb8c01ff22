package cronjob

import (
	"errors"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPlan(t *testing.T) {
	created := time.Date(2026, 1, 14, 10, 0, 0, 0, time.UTC)
	now := time.Date(2026, 1, 14, 10, 17, 30, 0, time.UTC)
	at := func(hhmm string) time.Time {
		tm, _ := time.Parse("15:04", hhmm)
		return time.Date(2026, 1, 14, tm.Hour(), tm.Minute(), 0, 0, time.UTC)
	}
	active := jobsByState{active: []*batchv1.Job{{}}}
	for _, tc := range []struct {
		name   string
		change func(*CronJob)
		jobs   jobsByState
		want   run
		err    error
	}{
		{name: "the latest missed run starts, and the next is a minute on", want: run{start: true, scheduled: at("10:17"), why: "scheduled", next: at("10:18")}},
		{name: "a run already scheduled (status) is not started again", change: func(c *CronJob) { c.Status.LastScheduleTime = &metav1.Time{Time: at("10:17")} },
			want: run{why: "no schedule missed", next: at("10:18")}},
		{name: "a run already scheduled (a Job's annotation, status not written yet) is not started again", jobs: jobsByState{lastScheduled: at("10:17")},
			want: run{why: "no schedule missed", next: at("10:18")}},
		{name: "a suspended CronJob starts nothing", change: func(c *CronJob) { c.Spec.Suspend = ptr.To(true) }, want: run{why: "suspended", next: at("10:18")}},
		{name: "Forbid starts nothing while a Job is active", change: func(c *CronJob) { c.Spec.ConcurrencyPolicy = ForbidConcurrent }, jobs: active,
			want: run{why: "forbidden while a Job is active", next: at("10:18")}},
		{name: "Replace starts the run while a Job is active", change: func(c *CronJob) { c.Spec.ConcurrencyPolicy = ReplaceConcurrent }, jobs: active,
			want: run{start: true, scheduled: at("10:17"), why: "scheduled", next: at("10:18")}},
		{name: "Allow starts the run while a Job is active", jobs: active, want: run{start: true, scheduled: at("10:17"), why: "scheduled", next: at("10:18")}},
		{name: "a run missed by more than the starting deadline is skipped", change: func(c *CronJob) { c.Spec.StartingDeadlineSeconds = ptr.To[int64](10) },
			want: run{why: "no schedule missed", next: at("10:18")}},
		{name: "a run missed by less than the starting deadline starts", change: func(c *CronJob) { c.Spec.StartingDeadlineSeconds = ptr.To[int64](60) },
			want: run{start: true, scheduled: at("10:17"), why: "scheduled", next: at("10:18")}},
		{name: "a schedule over a hundred runs behind is an error", change: func(c *CronJob) { c.CreationTimestamp.Time = created.Add(-2 * time.Hour) },
			want: run{next: at("10:18")}, err: errTooManyMissed},
		{name: "an hourly schedule has missed nothing since 10:00", change: func(c *CronJob) { c.Spec.Schedule = "@hourly" }, want: run{why: "no schedule missed", next: at("11:00")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj := &CronJob{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.Time{Time: created}}, Spec: CronJobSpec{Schedule: "* * * * *"}}
			if tc.change != nil {
				tc.change(cj)
			}
			got, err := plan(cj, tc.jobs, now)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Errorf("plan = %+v, %v; want %+v, %v", got, err, tc.want, tc.err)
			}
		})
	}
	if _, err := plan(&CronJob{Spec: CronJobSpec{Schedule: "every minute"}}, jobsByState{}, now); err == nil {
		t.Error("an invalid schedule is not an error")
	}
}

func TestSortJobs(t *testing.T) {
	job := func(name, scheduled string, cond batchv1.JobConditionType) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{ScheduledTimeAnnotation: scheduled}}}
		if cond != "" {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue}, {Type: cond, Status: corev1.ConditionTrue}}
		}
		return j
	}
	notYet := job("c", "2026-01-14T10:05:00Z", "")
	notYet.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionFalse}}
	s := sortJobs([]*batchv1.Job{
		job("s2", "2026-01-14T10:03:00Z", batchv1.JobComplete), notYet, job("f1", "2026-01-14T10:02:00Z", batchv1.JobFailed),
		job("s1", "2026-01-14T10:01:00Z", batchv1.JobComplete), job("a", "2026-01-14T10:04:00Z", ""),
	})
	names := func(js []*batchv1.Job) (out []string) {
		for _, j := range js {
			out = append(out, j.Name)
		}
		return out
	}
	if got, want := [3]string{strings.Join(names(s.active), " "), strings.Join(names(s.successful), " "), strings.Join(names(s.failed), " ")}, [3]string{"a c", "s1 s2", "f1"}; got != want {
		t.Errorf("active, successful, failed = %q; want %q (a False condition is not finished; oldest first)", got, want)
	}
	if want := time.Date(2026, 1, 14, 10, 5, 0, 0, time.UTC); !s.lastScheduled.Equal(want) {
		t.Errorf("lastScheduled = %v; want %v", s.lastScheduled, want)
	}
}
