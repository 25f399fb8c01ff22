package write_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/write"
)

func deploymentStatus(d *appsv1.Deployment) *appsv1.DeploymentStatus { return &d.Status }

// withStatus returns a Deployment shop/web at resource version rv with status st.
func withStatus(rv string, st appsv1.DeploymentStatus) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", ResourceVersion: rv, Generation: 4}, Status: st}
}

func TestStatusWriterUpdate(t *testing.T) {
	const (
		get          = "get deployments shop/web"
		updateStatus = "update deployments/status shop/web"
	)
	// The reconcile observed generation 4 and found 2 ready replicas.
	mutate := func(st *appsv1.DeploymentStatus) {
		st.ObservedGeneration = 4
		st.ReadyReplicas = 2
	}
	tests := []struct {
		name   string
		cached *appsv1.Deployment
		react  func(t *testing.T, cs *kubefake.Clientset)
		// removed removes the object from the fake before the update.
		removed bool

		wantErr   error
		wantCalls []string
		// wantWritten are the objects UpdateStatus was given.
		wantWritten []*appsv1.Deployment
	}{{
		name:        "a changed status is written through the status subresource at the cached resource version",
		cached:      withStatus("5", appsv1.DeploymentStatus{Replicas: 3}),
		wantCalls:   []string{updateStatus},
		wantWritten: []*appsv1.Deployment{withStatus("5", appsv1.DeploymentStatus{Replicas: 3, ObservedGeneration: 4, ReadyReplicas: 2})},
	}, {
		name:   "a status that already is as desired is not written: no API call",
		cached: withStatus("5", appsv1.DeploymentStatus{Replicas: 3, ObservedGeneration: 4, ReadyReplicas: 2}),
	}, {
		name:   "after a conflict the object is read again and the mutation applied to its current status",
		cached: withStatus("5", appsv1.DeploymentStatus{}),
		react: func(t *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("update", "deployments", failFirst(1, "update", "status", conflict("deployments"),
				setStored(t, cs, withStatus("6", appsv1.DeploymentStatus{Replicas: 3}))))
		},
		wantErr:   nil,
		wantCalls: []string{updateStatus, get, updateStatus},
		wantWritten: []*appsv1.Deployment{
			withStatus("5", appsv1.DeploymentStatus{ObservedGeneration: 4, ReadyReplicas: 2}),
			withStatus("6", appsv1.DeploymentStatus{Replicas: 3, ObservedGeneration: 4, ReadyReplicas: 2}),
		},
	}, {
		name:   "after a conflict, a current status that already is as desired is not written",
		cached: withStatus("5", appsv1.DeploymentStatus{}),
		react: func(t *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("update", "deployments", failFirst(1, "update", "status", conflict("deployments"),
				setStored(t, cs, withStatus("6", appsv1.DeploymentStatus{ObservedGeneration: 4, ReadyReplicas: 2}))))
		},
		wantCalls:   []string{updateStatus, get},
		wantWritten: []*appsv1.Deployment{withStatus("5", appsv1.DeploymentStatus{ObservedGeneration: 4, ReadyReplicas: 2})},
	}, {
		name:   "a conflict every time fails with the conflict after retry.DefaultRetry's 5 tries",
		cached: withStatus("5", appsv1.DeploymentStatus{}),
		react: func(_ *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("update", "deployments", failFirst(-1, "update", "status", conflict("deployments"), nil))
		},
		wantErr:     conflict("deployments")("web"),
		wantCalls:   append(repeat(4, updateStatus, get), updateStatus),
		wantWritten: repeat(5, withStatus("5", appsv1.DeploymentStatus{ObservedGeneration: 4, ReadyReplicas: 2})),
	}, {
		name:    "the status of an object that no longer exists is ErrGone, and nothing is created",
		cached:  withStatus("5", appsv1.DeploymentStatus{}),
		removed: true,
		react: func(_ *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("update", "deployments", failFirst(-1, "update", "status", notFound("deployments"), nil))
		},
		wantErr:     write.ErrGone,
		wantCalls:   []string{updateStatus, get},
		wantWritten: []*appsv1.Deployment{withStatus("5", appsv1.DeploymentStatus{ObservedGeneration: 4, ReadyReplicas: 2})},
	}, {
		name:   "NotFound for an object that exists means its kind has no status subresource",
		cached: withStatus("5", appsv1.DeploymentStatus{}),
		react: func(_ *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("update", "deployments", failFirst(-1, "update", "status", notFound("deployments"), nil))
		},
		wantErr:     write.ErrNoStatusSubresource,
		wantCalls:   []string{updateStatus, get},
		wantWritten: []*appsv1.Deployment{withStatus("5", appsv1.DeploymentStatus{ObservedGeneration: 4, ReadyReplicas: 2})},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := kubefake.NewClientset(tt.cached.DeepCopy())
			if tt.removed {
				if err := cs.Tracker().Delete(appsv1.SchemeGroupVersion.WithResource("deployments"), "shop", "web"); err != nil {
					t.Fatal(err)
				}
			}
			if tt.react != nil {
				tt.react(t, cs)
			}
			cached := tt.cached.DeepCopy()
			w := write.NewStatusWriter(cs.AppsV1().Deployments, deploymentStatus)

			err := w.Update(t.Context(), cached, mutate)

			checkErr(t, err, tt.wantErr)
			if tt.wantErr != nil {
				var we *write.WriteError
				if !errors.As(err, &we) || we.Op != "updating status of" || we.Namespace != "shop" || we.Name != "web" {
					t.Errorf("error %v is not a WriteError for updating status of shop/web", err)
				}
			}
			if diff := cmp.Diff(tt.wantCalls, apiCalls(&cs.Fake)); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			// The fake records who wrote which fields in managedFields, as the server does.
			noManagedFields := cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ManagedFields")
			if diff := cmp.Diff(tt.wantWritten, written[*appsv1.Deployment](t, &cs.Fake), noManagedFields); diff != "" {
				t.Errorf("objects written (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.cached, cached); diff != "" {
				t.Errorf("Update modified the cached object (-before +after):\n%s", diff)
			}
		})
	}
}

// A hand-written DeepCopyObject that shares the status's conditions with the copy must
// neither let the mutation change the cached object nor hide the change from the
// comparison (which would then write nothing).
func TestStatusWriterDoesNotRelyOnADeepDeepCopyObject(t *testing.T) {
	cached := &Gadget{TypeMeta: gadgetMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "g", ResourceVersion: "3"},
		Status: GadgetStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Starting"}}}}
	before := cached.DeepCopyObject().(*Gadget)
	before.Status.Conditions = append([]metav1.Condition(nil), cached.Status.Conditions...)
	dyn := fakeGadgets(t, cached)
	w := write.NewStatusWriter(client.FromDynamicNamespaced[*Gadget](dyn.Resource(gadgetGVR)), gadgetStatus)

	err := w.Update(t.Context(), cached, func(st *GadgetStatus) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Running"})
		st.Ready = true
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, cached); diff != "" {
		t.Errorf("Update modified the cached object (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"update gadgets/status lab/g"}, apiCalls(&dyn.Fake)); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	got := storedGadget(t, dyn, "lab", "g").Status
	if !got.Ready || !meta.IsStatusConditionTrue(got.Conditions, "Ready") {
		t.Errorf("stored status %+v, want ready with condition Ready true", got)
	}
}

func TestStatusWriterNilArgumentsAreErrorsNotPanics(t *testing.T) {
	cs := kubefake.NewClientset()
	ok := write.NewStatusWriter(cs.AppsV1().Deployments, deploymentStatus)
	obj := withStatus("1", appsv1.DeploymentStatus{})
	mutate := func(st *appsv1.DeploymentStatus) { st.Replicas = 1 }
	tests := []struct {
		name   string
		w      *write.StatusWriter[*appsv1.Deployment, appsv1.DeploymentStatus]
		obj    *appsv1.Deployment
		mutate func(*appsv1.DeploymentStatus)
	}{
		{"a nil StatusWriter", nil, obj, mutate},
		{"nil clients", write.NewStatusWriter[*appsv1.Deployment, appsv1.DeploymentStatus, appsv1client.DeploymentInterface](nil, deploymentStatus), obj, mutate},
		{"clients returning nil", write.NewStatusWriter(func(string) appsv1client.DeploymentInterface { return nil }, deploymentStatus), obj, mutate},
		{"a nil status function", write.NewStatusWriter[*appsv1.Deployment, appsv1.DeploymentStatus](cs.AppsV1().Deployments, nil), obj, mutate},
		{"a status function returning nil", write.NewStatusWriter(cs.AppsV1().Deployments, func(*appsv1.Deployment) *appsv1.DeploymentStatus { return nil }), obj, mutate},
		{"a nil object", ok, nil, mutate},
		{"a nil mutation", ok, obj, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.w.Update(t.Context(), tt.obj, tt.mutate); !errors.Is(err, controller.ErrNilArgument) {
				t.Errorf("Update returned %v, want an error wrapping ErrNilArgument", err)
			}
		})
	}
	if calls := apiCalls(&cs.Fake); len(calls) != 0 {
		t.Errorf("API calls were made: %v", calls)
	}
}
