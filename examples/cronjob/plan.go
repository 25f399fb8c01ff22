package cronjob

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The pure part of the reconcile: what to do, from the CronJob, its Jobs and the time.

// jobsByState are a CronJob's Jobs sorted by state, the finished oldest first, and the
// latest time any of them was scheduled for.
type jobsByState struct {
	active, successful, failed []*batchv1.Job
	lastScheduled              time.Time
}

// sortJobs sorts jobs by state, as their conditions say.
func sortJobs(jobs []*batchv1.Job) jobsByState {
	var s jobsByState
	for _, j := range jobs {
		switch finished(j) {
		case "":
			s.active = append(s.active, j)
		case batchv1.JobComplete:
			s.successful = append(s.successful, j)
		default:
			s.failed = append(s.failed, j)
		}
		s.lastScheduled = later(s.lastScheduled, scheduledTime(j))
	}
	oldestFirst := func(a, b *batchv1.Job) int {
		return cmp.Or(scheduledTime(a).Compare(scheduledTime(b)), strings.Compare(a.Name, b.Name))
	}
	slices.SortFunc(s.active, oldestFirst)
	slices.SortFunc(s.successful, oldestFirst)
	slices.SortFunc(s.failed, oldestFirst)
	return s
}

// finished is JobComplete or JobFailed once j has finished, "" while it runs.
func finished(j *batchv1.Job) batchv1.JobConditionType {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}
	return ""
}

// scheduledTime is the time j was scheduled for, from its annotation, or its creation
// time when it has none.
func scheduledTime(j *batchv1.Job) time.Time {
	if t, err := time.Parse(time.RFC3339, j.Annotations[ScheduledTimeAnnotation]); err == nil {
		return t
	}
	return j.CreationTimestamp.Time
}

// run is what a reconcile does about the schedule: start the Job scheduled for a time,
// or not and why, and when to look again.
type run struct {
	start     bool
	scheduled time.Time
	why       string
	next      time.Time
}

// errTooManyMissed is a schedule too far behind to catch up with.
var errTooManyMissed = errors.New("too many missed start times; check the clock")

// plan decides, at now, whether to start cj's latest missed run: not when suspended,
// not when its starting deadline has passed, not while a Job is active under Forbid.
func plan(cj *CronJob, jobs jobsByState, now time.Time) (run, error) {
	sched, err := ParseSchedule(cj.Spec.Schedule)
	if err != nil {
		return run{}, err
	}
	r := run{next: sched.Next(now)}
	if ptr.Deref(cj.Spec.Suspend, false) {
		r.why = "suspended"
		return r, nil
	}
	earliest := cj.CreationTimestamp.Time
	if t := cj.Status.LastScheduleTime; t != nil {
		earliest = later(earliest, t.Time)
	}
	earliest = later(earliest, jobs.lastScheduled)
	if d := cj.Spec.StartingDeadlineSeconds; d != nil {
		earliest = later(earliest, now.Add(-time.Duration(*d)*time.Second)) // older runs are too late to start
	}
	missed, err := lastMissed(sched, earliest, now)
	switch {
	case err != nil:
		return r, fmt.Errorf("schedule %q: %w", cj.Spec.Schedule, err)
	case missed.IsZero():
		r.why = "no schedule missed"
	case cj.Spec.ConcurrencyPolicy == ForbidConcurrent && len(jobs.active) > 0:
		r.why = "forbidden while a Job is active"
	default:
		r.start, r.scheduled, r.why = true, missed, "scheduled"
	}
	return r, nil
}

// lastMissed is the latest time in (earliest, now] that sched matches, zero if none.
func lastMissed(sched *Schedule, earliest, now time.Time) (time.Time, error) {
	var last time.Time
	for t, n := sched.Next(earliest), 0; !t.IsZero() && !t.After(now); t, n = sched.Next(t), n+1 {
		if n == maxMissed {
			return time.Time{}, errTooManyMissed
		}
		last = t
	}
	return last, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
