package cronjob

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/write"
)

const (
	// ScheduledTimeAnnotation is on each Job: the time it was scheduled for (RFC 3339).
	ScheduledTimeAnnotation = "batch.tutorial.kubebuilder.io/scheduled-at"
	// Component names the controller in its Events and its Lease.
	Component = "cronjob-controller"
	// ownerIndex indexes Jobs by the UID of the CronJob that controls them: a CronJob
	// deleted and made again under its name does not inherit the old one's Jobs.
	ownerIndex = "owner"
	// maxMissed bounds the missed start times counted (as the tutorial and
	// kube-controller-manager do): a schedule that far behind is a clock problem.
	maxMissed = 100
)

// Options configure a Controller.
type Options struct {
	// Namespace is where CronJobs are managed (all namespaces when "").
	Namespace string
	// Clock is what the schedules are read against, and what times the requeue at the
	// next schedule; the real clock when nil. Tests step a fake one.
	Clock clock.WithDelayedExecution
	// LeaderElection, when set, runs the reconciler only on the replica that leads
	// (its Client, Namespace and Name are set by New).
	LeaderElection *leaderelection.Config
	// HealthProbeAddress, when set, is where /healthz and /readyz are served.
	HealthProbeAddress string
	// OnError, when set, receives every reconcile error instead of the log
	// (typed.Options.OnError); it must not block.
	OnError func(ctx context.Context, key string, err error)
	// InstallCRD, when set, installs or upgrades the CronJob CRD before any cache starts.
	InstallCRD apiextensionsclient.Interface
	// Manager is the rest of the Manager's options, as a main's operator.Run gives them
	// (metrics server, ...). The fields above, when set, replace theirs; its
	// LeaderElection is used when LeaderElection above is nil, and New names the Lease.
	Manager manager.Options
}

// Controller is the CronJob controller: a Manager (Run runs it) and its caches.
type Controller struct {
	*manager.Manager
	CronJobs *manager.Cache[*CronJob]
	Jobs     *manager.Cache[*batchv1.Job]
}

// New returns the controller, talking to the cluster through cs and dyn.
func New(cs kubernetes.Interface, dyn dynamic.Interface, opts Options) (*Controller, error) {
	recorder, err := write.NewRecorder(cs, Component)
	if err != nil {
		return nil, err
	}
	mopts := opts.Manager
	mopts.HealthProbeAddress, mopts.FieldManager = cmp.Or(opts.HealthProbeAddress, mopts.HealthProbeAddress), Component
	if le := opts.LeaderElection; le != nil {
		le.Client, le.Namespace, le.Name = cs.CoordinationV1(), cmp.Or(opts.Namespace, "default"), Component
		mopts.LeaderElection = le
	} else if mopts.LeaderElection != nil {
		le := *mopts.LeaderElection // a copy: the caller's is left as it is
		le.Client, le.Name = cs.CoordinationV1(), Component
		mopts.LeaderElection = &le
	}
	if opts.InstallCRD != nil {
		mopts.InstallCRDs = &manager.CRDInstall{Client: opts.InstallCRD, Definitions: []*crd.Definition{Definition()}}
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := manager.New(mopts)
	cronJobs := client.FromDynamicNamespaced[*CronJob](dyn.Resource(Resource))

	// The wiring: CronJobs are reconciled when they change (a status write too: it
	// computes the same and writes nothing), when a Job they control changes, and at
	// their next scheduled time.
	b := manager.For(m, manager.Namespaced[*CronJob](cronJobs), manager.CacheOptions[*CronJob]{Namespaces: []string{opts.Namespace}}).
		WithKind(Kind).WithOptions(typed.Options{Clock: clk, OnError: opts.OnError})
	c := &Controller{Manager: m, CronJobs: b.Cache(),
		Jobs: manager.Owns(b, manager.Namespaced[*batchv1.Job](cs.BatchV1().Jobs).With(manager.Index(ownerIndex, controllerUID)))}
	r := &reconciler{jobs: c.Jobs, clock: clk, recorder: recorder,
		ownedJobs: write.NewOwned[*CronJob](cs.BatchV1().Jobs, Kind).WithCache(c.Jobs),
		// The status writer rather than the status applier: Active is replaced whole
		// either way (an atomic list), and the writer reads as "change the status I
		// have", compares, and writes nothing when nothing changed; the applier would
		// need a new CronJob with its TypeMeta, name and namespace filled in just to
		// carry the status.
		status: write.NewStatusWriter(cronJobs, func(c *CronJob) *CronJobStatus { return &c.Status })}
	_, err = b.Complete(r)
	if err = errors.Join(err, m.Add("events", manager.EveryReplica(recorder))); err != nil {
		return nil, err
	}
	return c, nil
}

// controllerUID is the Jobs' index: the UID of their controller, if a CronJob.
func controllerUID(j *batchv1.Job) ([]string, error) {
	if ref := metav1.GetControllerOf(j); ref != nil && ref.APIVersion == Kind.GroupVersion().String() && ref.Kind == Kind.Kind {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}

type reconciler struct {
	jobs      *manager.Cache[*batchv1.Job]
	clock     clock.Clock
	recorder  *write.Recorder
	ownedJobs *write.Owned[*CronJob, *batchv1.Job]
	status    *write.StatusWriter[*CronJob, CronJobStatus]
}

// Reconcile runs a CronJob: it reports its active Jobs, deletes finished Jobs beyond the
// history limits, starts the Job of the latest missed schedule as the concurrency policy
// allows, and comes back at the next schedule.
func (r *reconciler) Reconcile(ctx context.Context, req typed.Request[*CronJob]) (typed.Result, error) {
	cj := req.Object
	if cj == nil {
		return typed.Result{}, nil // deleted: the garbage collector deletes its Jobs
	}
	owned, err := r.jobs.ByIndexIn(cj.Namespace, ownerIndex, string(cj.UID))
	if err != nil {
		return typed.Result{}, err
	}
	jobs := sortJobs(owned)
	if err := r.deleteOldest(ctx, cj, jobs.successful, cj.Spec.SuccessfulJobsHistoryLimit); err != nil {
		return typed.Result{}, err
	}
	if err := r.deleteOldest(ctx, cj, jobs.failed, cj.Spec.FailedJobsHistoryLimit); err != nil {
		return typed.Result{}, err
	}
	now := r.clock.Now()
	run, err := plan(cj, jobs, now)
	if err != nil {
		r.recorder.Eventf(cj, nil, corev1.EventTypeWarning, "InvalidSchedule", "Schedule", "%v", err)
		return typed.Result{}, r.writeStatus(ctx, cj, jobs) // a new spec reconciles it again
	}
	if run.start {
		if cj.Spec.ConcurrencyPolicy == ReplaceConcurrent {
			for _, j := range jobs.active {
				if err := r.delete(ctx, cj, j); err != nil {
					return typed.Result{}, err
				}
			}
			jobs.active = nil
		}
		job, change, err := r.ownedJobs.CreateOnly(ctx, cj, cj.Namespace, jobName(cj, run.scheduled), func(j *batchv1.Job) { buildJob(cj, run.scheduled, j) })
		if err != nil {
			return typed.Result{}, err
		}
		if change == write.Created {
			r.recorder.Eventf(cj, job, corev1.EventTypeNormal, "Created", "CreateJob", "Created Job %s for %s", job.Name, run.scheduled.Format(time.RFC3339))
		}
		if !slices.ContainsFunc(jobs.active, func(a *batchv1.Job) bool { return a.Name == job.Name }) {
			jobs.active = append(jobs.active, job)
		}
		jobs.lastScheduled = later(jobs.lastScheduled, run.scheduled)
	}
	klog.FromContext(ctx).V(2).Info("Scheduled", "start", run.start, "why", run.why, "next", run.next)
	return typed.Result{RequeueAt: run.next}, r.writeStatus(ctx, cj, jobs)
}

// writeStatus reports the active Jobs and the latest scheduled time.
func (r *reconciler) writeStatus(ctx context.Context, cj *CronJob, jobs jobsByState) error {
	return r.status.Update(ctx, cj, func(s *CronJobStatus) {
		s.Active = nil
		for _, j := range jobs.active {
			s.Active = append(s.Active, corev1.ObjectReference{APIVersion: "batch/v1", Kind: "Job",
				Namespace: j.Namespace, Name: j.Name, UID: j.UID, ResourceVersion: j.ResourceVersion})
		}
		if !jobs.lastScheduled.IsZero() {
			s.LastScheduleTime = &metav1.Time{Time: jobs.lastScheduled}
		}
	})
}

// deleteOldest deletes the oldest of the finished jobs (oldest first) beyond limit.
func (r *reconciler) deleteOldest(ctx context.Context, cj *CronJob, finished []*batchv1.Job, limit *int32) error {
	if limit == nil {
		return nil
	}
	for i := 0; i < len(finished)-int(*limit); i++ {
		if err := r.delete(ctx, cj, finished[i]); err != nil {
			return err
		}
	}
	return nil
}

// delete deletes j if cj controls it, its pods in the background (write.Owned.Delete:
// the UID checked is the precondition, and the deletion is recorded for read-your-writes,
// so the next reconcile does not see it again).
func (r *reconciler) delete(ctx context.Context, cj *CronJob, j *batchv1.Job) error {
	deleted, err := r.ownedJobs.Delete(ctx, cj, j.Namespace, j.Name)
	if deleted {
		r.recorder.Eventf(cj, j, corev1.EventTypeNormal, "Deleted", "DeleteJob", "Deleted Job %s", j.Name)
	}
	return err
}

// jobName is deterministic: a second reconcile of the same schedule finds the Job.
func jobName(cj *CronJob, scheduled time.Time) string {
	return fmt.Sprintf("%s-%d", cj.Name, scheduled.Unix())
}

// buildJob makes j the CronJob's Job for the scheduled time (CreateOnly sets the name,
// namespace and controller reference).
func buildJob(cj *CronJob, scheduled time.Time, j *batchv1.Job) {
	tmpl := cj.Spec.JobTemplate.DeepCopy()
	j.Labels, j.Annotations, j.Spec = tmpl.Labels, tmpl.Annotations, tmpl.Spec
	if j.Annotations == nil {
		j.Annotations = map[string]string{}
	}
	j.Annotations[ScheduledTimeAnnotation] = scheduled.UTC().Format(time.RFC3339)
}
