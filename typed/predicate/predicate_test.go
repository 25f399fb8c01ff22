package predicate_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/typed/predicate"
)

type obj = *corev1.ConfigMap

// state is a ConfigMap with the metadata the ready predicates read.
func state(generation int64, rv string, labels, annotations map[string]string) obj {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Generation: generation,
		ResourceVersion: rv, Labels: labels, Annotations: annotations}}
}

func TestReadyPredicatesPassAdditionsDeletionsAndTheChangesTheyNameOnly(t *testing.T) {
	type verdicts struct{ Generation, Labels, Annotations, ResourceVersion bool }
	all := verdicts{true, true, true, true}
	v1 := state(1, "1", map[string]string{"app": "web"}, map[string]string{"note": "x"})
	tests := []struct {
		name string
		e    event.Event[obj]
		want verdicts
	}{
		{name: "an addition", e: event.Event[obj]{Type: event.Added, Object: v1}, want: all},
		{name: "an addition from the list", e: event.Event[obj]{Type: event.Added, Object: v1, Sync: true}, want: all},
		{name: "a deletion", e: event.Event[obj]{Type: event.Deleted, Object: v1, Prior: v1}, want: all},
		{name: "a final-state-unknown deletion with no state", e: event.Event[obj]{Type: event.Deleted, Sync: true, FinalStateUnknown: true}, want: all},
		{name: "a write to the spec",
			e:    event.Event[obj]{Type: event.Modified, Prior: v1, Object: state(2, "2", v1.Labels, v1.Annotations)},
			want: verdicts{Generation: true, ResourceVersion: true}},
		{name: "a write to the status",
			e:    event.Event[obj]{Type: event.Modified, Prior: v1, Object: state(1, "2", v1.Labels, v1.Annotations)},
			want: verdicts{ResourceVersion: true}},
		{name: "a change of labels",
			e:    event.Event[obj]{Type: event.Modified, Prior: v1, Object: state(1, "2", map[string]string{"app": "db"}, v1.Annotations)},
			want: verdicts{Labels: true, ResourceVersion: true}},
		{name: "a change of annotations",
			e:    event.Event[obj]{Type: event.Modified, Prior: v1, Object: state(1, "2", v1.Labels, nil)},
			want: verdicts{Annotations: true, ResourceVersion: true}},
		{name: "nil labels and annotations becoming empty ones",
			e:    event.Event[obj]{Type: event.Modified, Prior: state(1, "1", nil, nil), Object: state(1, "2", map[string]string{}, map[string]string{})},
			want: verdicts{ResourceVersion: true}},
		{name: "a resync of the same state", e: event.Event[obj]{Type: event.Modified, Prior: v1, Object: v1, Sync: true}, want: verdicts{}},
		{name: "a relist that brings a new generation",
			e:    event.Event[obj]{Type: event.Modified, Prior: v1, Object: state(3, "7", v1.Labels, v1.Annotations), Sync: true},
			want: verdicts{Generation: true, ResourceVersion: true}},
		{name: "a modification whose prior state is unknown", e: event.Event[obj]{Type: event.Modified, Object: v1}, want: all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := verdicts{
				Generation:      predicate.GenerationChanged(tt.e),
				Labels:          predicate.LabelsChanged(tt.e),
				Annotations:     predicate.AnnotationsChanged(tt.e),
				ResourceVersion: predicate.ResourceVersionChanged(tt.e),
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("passed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAndOrNotCombinePredicatesAndStopAtTheFirstThatDecides(t *testing.T) {
	yes := func(event.Event[obj]) bool { return true }
	no := func(event.Event[obj]) bool { return false }
	never := func(event.Event[obj]) bool { panic("called after the outcome was decided") }
	tests := []struct {
		name string
		p    predicate.Predicate[obj]
		want bool
	}{
		{"And of nothing passes", predicate.And[obj](), true},
		{"And of passing predicates passes", predicate.And[obj](yes, yes), true},
		{"And with one failing predicate fails", predicate.And[obj](yes, no), false},
		{"And stops at the first failing predicate", predicate.And[obj](no, never), false},
		{"Or of nothing fails", predicate.Or[obj](), false},
		{"Or with one passing predicate passes", predicate.Or[obj](no, yes), true},
		{"Or of failing predicates fails", predicate.Or[obj](no, no), false},
		{"Or stops at the first passing predicate", predicate.Or[obj](yes, never), true},
		{"Not of a passing predicate fails", predicate.Not[obj](yes), false},
		{"Not of a failing predicate passes", predicate.Not[obj](no), true},
		{"ready predicates combine without type arguments of their own",
			predicate.And[obj](predicate.Not[obj](predicate.GenerationChanged), predicate.ResourceVersionChanged), true},
	}
	status := event.Event[obj]{Type: event.Modified, Prior: state(1, "1", nil, nil), Object: state(1, "2", nil, nil)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p(status); got != tt.want {
				t.Errorf("= %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCombinatorsOfANilPredicateAreNil(t *testing.T) {
	yes := func(event.Event[obj]) bool { return true }
	tests := []struct {
		name string
		p    predicate.Predicate[obj]
	}{
		{"And", predicate.And[obj](yes, nil)},
		{"Or", predicate.Or[obj](nil, yes)},
		{"Not", predicate.Not[obj](nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.p != nil {
				t.Error("a combinator of a nil predicate is not nil, so nothing would report it before it panics")
			}
		})
	}
}
