// Package cronjob holds the CronJob type of the kubebuilder tutorial
// (https://book.kubebuilder.io/cronjob-tutorial/api-design) as a plain Go
// struct, and its CustomResourceDefinition built from that struct at run time
// by typed/crd, with the tutorial's validation stated in Go instead of marker
// comments. No code generation: DeepCopyObject is written by hand.
//
// It also holds the tutorial's controller
// (https://book.kubebuilder.io/cronjob-tutorial/controller-implementation) on a
// manager.Manager: New wires it, Reconcile (controller.go) acts on what plan (plan.go)
// decides from the CronJob, its Jobs and the clock, and ParseSchedule (schedule.go) reads
// the cron schedule without a dependency. cmd/cronjob-operator runs it.
package cronjob

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is the CronJob's API group, version and kind, and Resource its resource.
var (
	Kind     = schema.GroupVersionKind{Group: "batch.tutorial.kubebuilder.io", Version: "v1", Kind: "CronJob"}
	Resource = Kind.GroupVersion().WithResource("cronjobs")
)

// CronJob runs a Job on a schedule.
type CronJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              CronJobSpec   `json:"spec"`
	Status            CronJobStatus `json:"status,omitempty"`
}

// CronJobSpec is the desired state of a CronJob.
type CronJobSpec struct {
	// Schedule is in Cron format, see https://en.wikipedia.org/wiki/Cron.
	Schedule string `json:"schedule"`
	// StartingDeadlineSeconds is the deadline in seconds for starting the job
	// if it misses its scheduled time; missed jobs count as failed.
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`
	// ConcurrencyPolicy says how to treat concurrent executions of a Job.
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`
	// Suspend tells the controller to suspend subsequent executions.
	Suspend *bool `json:"suspend,omitempty"`
	// JobTemplate is the Job created on each run.
	JobTemplate batchv1.JobTemplateSpec `json:"jobTemplate"`
	// SuccessfulJobsHistoryLimit is the number of successful finished jobs to keep.
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`
	// FailedJobsHistoryLimit is the number of failed finished jobs to keep.
	FailedJobsHistoryLimit *int32 `json:"failedJobsHistoryLimit,omitempty"`
}

// ConcurrencyPolicy describes how the job will be handled. Only one of the
// policies may be given; Allow is the default.
type ConcurrencyPolicy string

const (
	// AllowConcurrent allows CronJobs to run concurrently.
	AllowConcurrent ConcurrencyPolicy = "Allow"
	// ForbidConcurrent skips the next run if the previous one hasn't finished.
	ForbidConcurrent ConcurrencyPolicy = "Forbid"
	// ReplaceConcurrent cancels the running job and replaces it with a new one.
	ReplaceConcurrent ConcurrencyPolicy = "Replace"
)

// EnumValues makes the policies the only valid values wherever the type is
// used in a CRD built by typed/crd (crd.Enumerated).
func (ConcurrencyPolicy) EnumValues() []string {
	return []string{string(AllowConcurrent), string(ForbidConcurrent), string(ReplaceConcurrent)}
}

// CronJobStatus is the observed state of a CronJob.
type CronJobStatus struct {
	// Active holds pointers to the currently running jobs.
	Active []corev1.ObjectReference `json:"active,omitempty"`
	// LastScheduleTime is when the job was last successfully scheduled.
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (c *CronJob) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	c.Spec.JobTemplate.DeepCopyInto(&out.Spec.JobTemplate)
	out.Spec.StartingDeadlineSeconds = clone(c.Spec.StartingDeadlineSeconds)
	out.Spec.Suspend = clone(c.Spec.Suspend)
	out.Spec.SuccessfulJobsHistoryLimit = clone(c.Spec.SuccessfulJobsHistoryLimit)
	out.Spec.FailedJobsHistoryLimit = clone(c.Spec.FailedJobsHistoryLimit)
	if c.Status.Active != nil {
		out.Status.Active = append([]corev1.ObjectReference(nil), c.Status.Active...) // no pointers inside
	}
	if c.Status.LastScheduleTime != nil {
		out.Status.LastScheduleTime = c.Status.LastScheduleTime.DeepCopy()
	}
	return &out
}

func clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
