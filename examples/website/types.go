package website

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is the Website's API group, version and kind, and Resource its resource: the
// operator names them once, for its owner references (write.NewOwned), its wiring
// (manager.Builder.WithKind) and the dynamic client.
var (
	Kind     = schema.GroupVersionKind{Group: "examples.typedinformer.io", Version: "v1", Kind: "Website"}
	Resource = Kind.GroupVersion().WithResource("websites")
)

// Website is a static web site: a message served by Spec.Replicas web servers. It is a
// custom resource's Go struct, written by hand, with no code generation: its JSON tags
// are its schema, and DeepCopyObject is the one method it needs.
type Website struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WebsiteSpec   `json:"spec"`
	Status            WebsiteStatus `json:"status,omitempty"`
}

// WebsiteSpec is what the user asks for.
type WebsiteSpec struct {
	// Message is the page served.
	Message string `json:"message"`
	// Replicas is how many web servers serve it.
	Replicas int32 `json:"replicas"`
}

// WebsiteStatus is what the operator reports, through the status subresource.
type WebsiteStatus struct {
	// ObservedGeneration is the generation of the spec last reconciled.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ReadyReplicas is the Deployment's.
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// Conditions holds Ready: True once ReadyReplicas reaches Spec.Replicas.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (w *Website) DeepCopyObject() runtime.Object {
	if w == nil {
		return nil
	}
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if w.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(w.Status.Conditions))
		for i := range w.Status.Conditions {
			w.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
	return &out
}
