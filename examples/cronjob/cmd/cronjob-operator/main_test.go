package main_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/typedinformer/typedinformer/examples/cronjob"
	"github.com/typedinformer/typedinformer/internal/testsupport/mainproc"
	"github.com/typedinformer/typedinformer/typed/client"
)

// operator is this package's main.
var operator mainproc.Binary

func TestMain(m *testing.M) {
	code := m.Run()
	operator.Remove()
	os.Exit(code)
}

// The main, built and run as a process against a real control plane with flags and a
// pod's environment: it installs its CRD, becomes ready, leads, reports the Job a CronJob
// controls in the CronJob's status, serves controller-runtime's metrics, and on SIGTERM
// exits 0 with its Lease released.
func TestMainRunsUntilSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := mainproc.StartOperator(ctx, t, &operator, "cronjob-0", "-install-crd")

	// A CronJob due once a year, and a Job it controls that is still running (no
	// controller runs Jobs here): the main reports it as active.
	cronJobs := client.FromDynamicNamespaced[*cronjob.CronJob](dynamic.NewForConfigOrDie(o.Env.AdminConfig()).Resource(cronjob.Resource))(o.Namespace)
	template := corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure,
		Containers: []corev1.Container{{Name: "hello", Image: "busybox", Args: []string{"date"}}}}}
	cj, err := cronJobs.Create(ctx, &cronjob.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: cronjob.Kind.GroupVersion().String(), Kind: cronjob.Kind.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "yearly"},
		Spec:       cronjob.CronJobSpec{Schedule: "0 0 1 1 *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: template}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job, err := o.Clientset.BatchV1().Jobs(o.Namespace).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "yearly-by-hand", OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, cronjob.Kind)}},
		Spec:       batchv1.JobSpec{Template: template},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mainproc.Poll(ctx, t, "the Job in the CronJob's status", func(ctx context.Context) (bool, error) {
		cj, err := cronJobs.Get(ctx, "yearly", metav1.GetOptions{})
		return err == nil && len(cj.Status.Active) == 1 && cj.Status.Active[0].UID == job.UID, nil
	})

	o.CheckLeads(ctx, t, cronjob.Component)
	mainproc.Poll(ctx, t, "a successful reconcile on /metrics", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.Metrics+"/metrics", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return err == nil && strings.Contains(string(body), `controller_runtime_reconcile_total{controller="`) &&
			strings.Contains(string(body), `result="success"`), nil
	})

	o.CheckGracefulStop(ctx, t, cronjob.Component)
}
