//go:build unix

package cronjob_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/examples/cronjob"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// valid returns a CronJob the CRD accepts: the tutorial's sample.
func valid(name string) *cronjob.CronJob {
	return &cronjob.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: cronjob.Kind.GroupVersion().String(), Kind: cronjob.Kind.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: cronjob.CronJobSpec{
			Schedule: "*/1 * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "hello"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyOnFailure,
					Containers:    []corev1.Container{{Name: "hello", Image: "busybox", Args: []string{"date"}}},
				},
			}}},
		},
	}
}

func podSpec(c *cronjob.CronJob) *corev1.PodSpec { return &c.Spec.JobTemplate.Spec.Template.Spec }

// cases are invalid CronJobs, each with a valid twin that differs only in the
// invalid part, and the field the server's refusal names. serverOnly marks
// the cases only the schema taken from the server's OpenAPI refuses: the
// enums of built-in types, which their Go types cannot state.
var cases = []struct {
	name          string
	invalid, twin func(*cronjob.CronJob)
	field         string
	serverOnly    bool
	// raw changes the invalid CronJob's JSON, for what its Go type cannot
	// say: a field missing, a value of another type.
	raw func(obj map[string]any)
}{
	{"a schedule that is not cron", func(c *cronjob.CronJob) { c.Spec.Schedule = "every minute" }, func(c *cronjob.CronJob) { c.Spec.Schedule = "* * * * *" }, "spec.schedule", false, nil},
	{"an empty schedule", func(c *cronjob.CronJob) { c.Spec.Schedule = "" }, func(c *cronjob.CronJob) { c.Spec.Schedule = "@daily" }, "spec.schedule", false, nil},
	{"a negative starting deadline", func(c *cronjob.CronJob) { c.Spec.StartingDeadlineSeconds = ptr.To[int64](-1) }, func(c *cronjob.CronJob) { c.Spec.StartingDeadlineSeconds = ptr.To[int64](0) }, "spec.startingDeadlineSeconds", false, nil},
	{"a negative successful jobs history limit", func(c *cronjob.CronJob) { c.Spec.SuccessfulJobsHistoryLimit = ptr.To[int32](-1) }, func(c *cronjob.CronJob) { c.Spec.SuccessfulJobsHistoryLimit = ptr.To[int32](0) }, "spec.successfulJobsHistoryLimit", false, nil},
	{"a negative failed jobs history limit", func(c *cronjob.CronJob) { c.Spec.FailedJobsHistoryLimit = ptr.To[int32](-3) }, func(c *cronjob.CronJob) { c.Spec.FailedJobsHistoryLimit = ptr.To[int32](3) }, "spec.failedJobsHistoryLimit", false, nil},
	{"an unknown concurrency policy", func(c *cronjob.CronJob) { c.Spec.ConcurrencyPolicy = "Sometimes" }, func(c *cronjob.CronJob) { c.Spec.ConcurrencyPolicy = cronjob.ForbidConcurrent }, "spec.concurrencyPolicy", false, nil},
	{"a concurrency policy in the wrong case", func(c *cronjob.CronJob) { c.Spec.ConcurrencyPolicy = "replace" }, func(c *cronjob.CronJob) { c.Spec.ConcurrencyPolicy = cronjob.ReplaceConcurrent }, "spec.concurrencyPolicy", false, nil},
	{"a container without a name", func(c *cronjob.CronJob) {}, func(c *cronjob.CronJob) { podSpec(c).Containers[0].Name = "other" }, "spec.jobTemplate.spec.template.spec.containers[0].name", false,
		func(obj map[string]any) { delete(container0(obj), "name") }},
	{"two containers of one name", func(c *cronjob.CronJob) {
		podSpec(c).Containers = append(podSpec(c).Containers, corev1.Container{Name: "hello", Image: "busybox"})
	}, func(c *cronjob.CronJob) {
		podSpec(c).Containers = append(podSpec(c).Containers, corev1.Container{Name: "sidecar", Image: "busybox"})
	}, "spec.jobTemplate.spec.template.spec.containers[1]", false, nil},
	{"an environment variable without a name", func(c *cronjob.CronJob) { podSpec(c).Containers[0].Env = []corev1.EnvVar{{Value: "x"}} }, func(c *cronjob.CronJob) { podSpec(c).Containers[0].Env = []corev1.EnvVar{{Name: "X", Value: "x"}} }, "spec.jobTemplate.spec.template.spec.containers[0].env[0].name", false,
		func(obj map[string]any) { delete(container0(obj)["env"].([]any)[0].(map[string]any), "name") }},
	{"a CPU limit that is not a quantity", func(c *cronjob.CronJob) {}, func(c *cronjob.CronJob) {
		podSpec(c).Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	}, "spec.jobTemplate.spec.template.spec.containers[0].resources.limits.cpu", false,
		func(obj map[string]any) {
			container0(obj)["resources"] = map[string]any{"limits": map[string]any{"cpu": "lots"}}
		}},
	{"an unknown restart policy", func(c *cronjob.CronJob) { podSpec(c).RestartPolicy = "Sometimes" }, func(c *cronjob.CronJob) { podSpec(c).RestartPolicy = corev1.RestartPolicyNever }, "spec.jobTemplate.spec.template.spec.restartPolicy", true, nil},
	{"an unknown image pull policy", func(c *cronjob.CronJob) { podSpec(c).Containers[0].ImagePullPolicy = "Sometimes" }, func(c *cronjob.CronJob) { podSpec(c).Containers[0].ImagePullPolicy = corev1.PullIfNotPresent }, "spec.jobTemplate.spec.template.spec.containers[0].imagePullPolicy", true, nil},
	{"an unknown port protocol", func(c *cronjob.CronJob) {
		podSpec(c).Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, Protocol: "XTCP"}}
	}, func(c *cronjob.CronJob) {
		podSpec(c).Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolUDP}}
	}, "spec.jobTemplate.spec.template.spec.containers[0].ports[0].protocol", true, nil},
}

// TestTheCRDRefusesTheTutorialsInvalidCronJobs installs the CronJob CRD built
// by reflection, then upgrades it in place to the one built from the
// server's OpenAPI, on a real kube-apiserver; with each, every invalid
// CronJob is refused at create time (Invalid, naming the field) and its valid
// twin accepted, except that reflection cannot refuse what only the server's
// enums of built-in types say.
func TestTheCRDRefusesTheTutorialsInvalidCronJobs(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ext := apiextensionsclient.NewForConfigOrDie(env.AdminConfig())
	cronjobs := dynamic.NewForConfigOrDie(env.AdminConfig()).Resource(cronjob.Resource).Namespace("default")

	reflected, err := cronjob.Definition().Build()
	if err != nil {
		t.Fatal(err)
	}
	fromServer, err := cronjob.Definition().BuildFromServer(ctx, ext.Discovery().OpenAPIV3())
	if err != nil {
		t.Fatal(err)
	}
	short := cronjob.Definition()
	short.NoServerDescriptions = true
	fromServerShort, err := short.BuildFromServer(ctx, ext.Discovery().OpenAPIV3())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CRD sizes in JSON: reflected %d bytes, from the server %d, from the server without descriptions %d",
		jsonSize(t, reflected), jsonSize(t, fromServer), jsonSize(t, fromServerShort))
	for _, tc := range []struct {
		name, prefix string
		crd          *apiextensionsv1.CustomResourceDefinition
		fromServer   bool
	}{{"reflection", "reflected", reflected, false}, {"the server's OpenAPI", "server", fromServer, true}} {
		t.Run("with the schema of built-in types from "+tc.name, func(t *testing.T) {
			start := time.Now()
			if err := crd.Install(ctx, ext, tc.crd); err != nil {
				t.Fatal(err)
			}
			t.Logf("installed in %v", time.Since(start).Round(time.Millisecond))
			for i, c := range cases {
				refused := tc.fromServer || !c.serverOnly
				t.Run(c.name, func(t *testing.T) {
					bad := valid(fmt.Sprintf("%s-bad-%d", tc.prefix, i))
					c.invalid(bad)
					u := toUnstructured(t, bad)
					if c.raw != nil {
						c.raw(u.Object)
					}
					_, err := cronjobs.Create(ctx, u, metav1.CreateOptions{})
					switch {
					case refused && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.field)):
						t.Errorf("creating the invalid CronJob: %v; want Invalid naming %s", err, c.field)
					case !refused && err != nil:
						t.Errorf("creating the CronJob that only the server's schema refuses: %v; want it accepted (if reflection refuses it now, the case is no longer server-only)", err)
					}
					twin := valid(fmt.Sprintf("%s-good-%d", tc.prefix, i))
					c.twin(twin)
					if _, err := cronjobs.Create(ctx, toUnstructured(t, twin), metav1.CreateOptions{}); err != nil {
						t.Errorf("creating the valid twin: %v", err)
					}
				})
			}
		})
	}
	t.Run("the concurrency policy defaults to Allow, and a pod template's labels are kept", func(t *testing.T) {
		got, err := cronjobs.Get(ctx, "server-good-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var c cronjob.CronJob
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &c); err != nil {
			t.Fatal(err)
		}
		if c.Spec.ConcurrencyPolicy != cronjob.AllowConcurrent || c.Spec.JobTemplate.Spec.Template.Labels["app"] != "hello" {
			t.Errorf("stored CronJob: concurrencyPolicy %q, template labels %v; want Allow and app=hello", c.Spec.ConcurrencyPolicy, c.Spec.JobTemplate.Spec.Template.Labels)
		}
	})
}

// container0 is the first container of a CronJob's JSON, to change in place
// (unstructured's Nested functions return copies).
func container0(obj map[string]any) map[string]any {
	m := obj
	for _, k := range []string{"spec", "jobTemplate", "spec", "template", "spec"} {
		m = m[k].(map[string]any)
	}
	return m["containers"].([]any)[0].(map[string]any)
}

func jsonSize(t *testing.T, c *apiextensionsv1.CustomResourceDefinition) int {
	t.Helper()
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return len(raw)
}

func toUnstructured(t *testing.T, c *cronjob.CronJob) *unstructured.Unstructured {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}
