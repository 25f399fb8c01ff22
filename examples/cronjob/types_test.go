package cronjob_test

import (
	"encoding/json"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/cronjob"
)

func TestDeepCopyObjectSharesNothingWithTheOriginal(t *testing.T) {
	now := metav1.Now()
	c := &cronjob.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}},
		Spec: cronjob.CronJobSpec{Schedule: "@daily", StartingDeadlineSeconds: ptr.To[int64](1), Suspend: ptr.To(false),
			SuccessfulJobsHistoryLimit: ptr.To[int32](1), FailedJobsHistoryLimit: ptr.To[int32](1),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Args: []string{"x"}}}}}}}},
		Status: cronjob.CronJobStatus{Active: []corev1.ObjectReference{{Name: "j"}}, LastScheduleTime: &now},
	}
	before, _ := json.Marshal(c)
	cp := c.DeepCopyObject().(*cronjob.CronJob)
	cp.Labels["k"] = "changed"
	*cp.Spec.StartingDeadlineSeconds, *cp.Spec.Suspend = 2, true
	*cp.Spec.SuccessfulJobsHistoryLimit, *cp.Spec.FailedJobsHistoryLimit = 2, 2
	cp.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args[0] = "changed"
	cp.Status.Active[0].Name = "changed"
	cp.Status.LastScheduleTime.Time = cp.Status.LastScheduleTime.AddDate(1, 0, 0)
	if after, _ := json.Marshal(c); string(after) != string(before) {
		t.Errorf("changing the copy changed the original:\nbefore %s\nafter  %s", before, after)
	}
	if (*cronjob.CronJob)(nil).DeepCopyObject() != nil {
		t.Error("a nil CronJob's copy is not nil")
	}
}
