package manager_test

import (
	"context"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// schedules reconciles a ConfigMap that owns Jobs, as the kubebuilder book's CronJob
// controller does: its struct holds the owned cache as *manager.Cache[*batchv1.Job],
// with no list type, and reads it through an index, one namespace at a time.
type schedules struct {
	jobs *manager.Cache[*batchv1.Job]
	seen chan string
}

func (s *schedules) Reconcile(_ context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
	active, err := s.jobs.ByIndexIn(req.Namespace, "phase", "active")
	if err != nil {
		return typed.Result{}, err
	}
	s.seen <- fmt.Sprintf("%s: %d active jobs", req.Key, len(active))
	return typed.Result{}, nil
}

// jobPhase indexes Jobs by whether they still run.
func jobPhase(j *batchv1.Job) ([]string, error) {
	if j.Status.Active > 0 {
		return []string{"active"}, nil
	}
	return []string{"done"}, nil
}

// An owned kind cached with an index of its own: Source.With gives Owns the cache options
// (manager.Index infers the object type from the index function), and ByIndexIn reads
// one namespace of a cache of several, so index values need not carry the namespace.
func ExampleSource_With() {
	var objs []runtime.Object
	for ns, active := range map[string]int{"shop": 1, "lab": 2} {
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly", UID: types.UID("uid-" + ns)}}
		objs = append(objs, owner)
		for i := range 3 {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("nightly-%d", i),
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}}}
			if i < active {
				job.Status.Active = 1
			}
			objs = append(objs, job)
		}
	}
	cs := kubefake.NewClientset(objs...)
	m := manager.New(manager.Options{})

	b := manager.For(m, manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps),
		manager.CacheOptions[*corev1.ConfigMap]{Namespaces: []string{"shop", "lab"}})
	r := &schedules{seen: make(chan string, 10)}
	r.jobs = manager.Owns(b, manager.Namespaced[*batchv1.Job](cs.BatchV1().Jobs).With(manager.Index("phase", jobPhase)))
	if _, err := b.Complete(r); err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	lines := []string{<-r.seen, <-r.seen}
	slices.Sort(lines)
	for _, line := range lines {
		fmt.Println(line)
	}
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// lab/nightly: 2 active jobs
	// shop/nightly: 1 active jobs
	// stopped: <nil>
}
