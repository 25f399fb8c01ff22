package website

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is the Website's API group, version and kind, and Resource its resource: the
// operator names them once, for its owner references (write.NewOwned), its wiring
// (manager.Builder.WithKind) and the dynamic client. v1 is the storage version and the
// hub of conversions; KindV2 and ResourceV2 are the second version's (WebsiteV2).
var (
	Kind       = schema.GroupVersionKind{Group: "examples.typedinformer.io", Version: "v1", Kind: "Website"}
	Resource   = Kind.GroupVersion().WithResource("websites")
	KindV2     = Kind.GroupKind().WithVersion("v2")
	ResourceV2 = KindV2.GroupVersion().WithResource("websites")
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
	// Message is the page served: at most MaxMessageLength characters (the validating
	// webhook refuses more).
	Message string `json:"message"`
	// Title is the page's title; the defaulting webhook sets it to the message's first
	// line, cut at MaxTitleLength characters, when it is left out.
	Title string `json:"title,omitempty"`
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
	out.Status = *w.Status.deepCopy()
	return &out
}

// WebsiteV2 is version v2 of a Website: the page's title and text are grouped in
// Spec.Page, and the message is called the body there. It converts to and from the hub,
// Website (v1), through the conversion webhook (ConvertTo, ConvertFrom); nothing is lost
// either way.
type WebsiteV2 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WebsiteSpecV2 `json:"spec"`
	Status            WebsiteStatus `json:"status,omitempty"`
}

// WebsiteSpecV2 is what the user asks for, in v2.
type WebsiteSpecV2 struct {
	// Page is what is served.
	Page Page `json:"page"`
	// Replicas is how many web servers serve it.
	Replicas int32 `json:"replicas"`
}

// Page is a web page: v1's Title and Message.
type Page struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body"`
}

// ConvertTo fills hub, a v1 Website, from w.
func (w *WebsiteV2) ConvertTo(hub *Website) error {
	hub.ObjectMeta = *w.ObjectMeta.DeepCopy()
	hub.Spec = WebsiteSpec{Message: w.Spec.Page.Body, Title: w.Spec.Page.Title, Replicas: w.Spec.Replicas}
	hub.Status = *w.Status.deepCopy()
	return nil
}

// ConvertFrom fills w from hub, a v1 Website.
func (w *WebsiteV2) ConvertFrom(hub *Website) error {
	w.ObjectMeta = *hub.ObjectMeta.DeepCopy()
	w.Spec = WebsiteSpecV2{Page: Page{Title: hub.Spec.Title, Body: hub.Spec.Message}, Replicas: hub.Spec.Replicas}
	w.Status = *hub.Status.deepCopy()
	return nil
}

// DeepCopyObject implements runtime.Object.
func (w *WebsiteV2) DeepCopyObject() runtime.Object {
	if w == nil {
		return nil
	}
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status = *w.Status.deepCopy()
	return &out
}

func (s *WebsiteStatus) deepCopy() *WebsiteStatus {
	out := *s
	if s.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(s.Conditions))
		for i := range s.Conditions {
			s.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	return &out
}
