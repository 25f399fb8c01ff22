package write_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/typed/consistency"
	"github.com/typedinformer/typedinformer/typed/write"
)

// recorded keeps the objects a reconcile's writers record.
type recorded struct {
	mu      sync.Mutex
	wrote   []string
	deleted []string
}

func (r *recorded) Wrote(obj runtime.Object) {
	o := obj.(metav1.Object)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wrote = append(r.wrote, o.GetName()+"@"+o.GetResourceVersion())
}

func (r *recorded) Deleted(obj runtime.Object) {
	o := obj.(metav1.Object)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deleted = append(r.deleted, o.GetName()+"@"+string(o.GetUID()))
}

func (r *recorded) deletions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.deleted...)
}

func (r *recorded) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.wrote...)
}

// DESIGN 19: the writers record, for the reconcile their context belongs to, what the
// server answered a write with, so that the Loop waits for its caches to show it; a write
// the server refuses records nothing, and a write that is not needed makes no call and
// records nothing.
func TestWritersRecordWhatTheServerAnsweredAndNothingForAFailedWrite(t *testing.T) {
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-web", ResourceVersion: "1", Generation: 2}}
	cs := kubefake.NewClientset(web)
	status := write.NewStatusWriter(cs.AppsV1().Deployments, func(d *appsv1.Deployment) *appsv1.DeploymentStatus { return &d.Status })
	owned := write.NewOwned[*appsv1.Deployment](cs.CoreV1().ConfigMaps, appsv1.SchemeGroupVersion.WithKind("Deployment"))
	rec := &recorded{}
	ctx := consistency.WithRecorder(context.Background(), rec)
	observed := func(st *appsv1.DeploymentStatus) { st.ObservedGeneration = 2 }

	cs.PrependReactor("update", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the server is down")
	})
	cs.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the server is down")
	})
	if err := status.Update(ctx, web, observed); err == nil {
		t.Fatal("a status write the server refused succeeded")
	}
	if _, err := owned.CreateOrUpdate(ctx, web, "shop", "web-settings", func(*corev1.ConfigMap) {}); err == nil {
		t.Fatal("a create the server refused succeeded")
	}
	if got := rec.all(); len(got) != 0 {
		t.Fatalf("failed writes recorded %v", got)
	}

	cs.ReactionChain = cs.ReactionChain[2:] // the server is back
	if err := status.Update(ctx, web, observed); err != nil {
		t.Fatal(err)
	}
	if _, err := owned.CreateOrUpdate(ctx, web, "shop", "web-settings", func(cm *corev1.ConfigMap) { cm.ResourceVersion = "5" }); err != nil {
		t.Fatal(err)
	}
	got := rec.all()
	if len(got) != 2 || got[0] != "web@1" || got[1] != "web-settings@5" {
		t.Fatalf("writes recorded %v; want the status write's answer, then the create's", got)
	}
	current, _ := cs.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
	if err := status.Update(ctx, current, observed); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.all()); n != 2 {
		t.Fatalf("a status write that changes nothing recorded something: %v", rec.all())
	}
}
