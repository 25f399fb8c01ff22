package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Widget is the custom resource every subject caches: a Go struct with JSON tags, as an
// operator's author writes it, with a spec of the size and shape of a typical one.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec"`
	Status            WidgetStatus `json:"status,omitempty"`
}

// WidgetSpec is what the benchmark fills in and updates.
type WidgetSpec struct {
	Replicas int32             `json:"replicas"`
	Image    string            `json:"image"`
	Owner    string            `json:"owner"`
	Tags     []string          `json:"tags,omitempty"`
	Config   map[string]string `json:"config,omitempty"`
	Ports    []WidgetPort      `json:"ports,omitempty"`
}

// WidgetPort is one entry of a list of structs.
type WidgetPort struct {
	Name     string `json:"name"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol"`
}

// WidgetStatus is a status with conditions.
type WidgetStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Tags = append([]string(nil), w.Spec.Tags...)
	out.Spec.Ports = append([]WidgetPort(nil), w.Spec.Ports...)
	if w.Spec.Config != nil {
		out.Spec.Config = make(map[string]string, len(w.Spec.Config))
		for k, v := range w.Spec.Config {
			out.Spec.Config[k] = v
		}
	}
	out.Status.Conditions = make([]metav1.Condition, len(w.Status.Conditions))
	for i := range w.Status.Conditions {
		w.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
	}
	return &out
}

// WidgetList is the list type controller-runtime's scheme needs.
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *WidgetList) DeepCopyObject() runtime.Object {
	out := &WidgetList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Widget, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Widget)
	}
	return out
}

var (
	widgetGV  = schema.GroupVersion{Group: "bench.typedinformer.io", Version: "v1"}
	widgetGVR = widgetGV.WithResource("widgets")
)

// addWidgets registers Widget in a scheme, as controller-runtime users do.
func addWidgets(s *runtime.Scheme) error {
	s.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(s, widgetGV)
	return nil
}
