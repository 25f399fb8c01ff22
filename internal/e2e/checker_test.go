package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/event"
)

// TestCheckerFlagsInconsistentEvents makes sure the checking handler that every
// end-to-end test relies on is not vacuous: it accepts a consistent sequence and flags
// each kind of inconsistency. It needs no control plane.
func TestCheckerFlagsInconsistentEvents(t *testing.T) {
	obj := func(name, rv, uid string) cm {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv, UID: types.UID(uid)}}
	}
	a1, a2, a3 := obj("a", "1", "u1"), obj("a", "2", "u1"), obj("a", "3", "u1")
	ev := func(typ event.Type, o, prior cm) event.Event[cm] {
		return event.Event[cm]{Type: typ, Object: o, Prior: prior}
	}
	tests := []struct {
		name   string
		events []event.Event[cm]
		wantOK bool
	}{
		{name: "consistent", wantOK: true, events: []event.Event[cm]{
			ev(event.Added, a1, nil), ev(event.Modified, a2, a1), ev(event.Modified, a2, a2), // a relist's no-op
			ev(event.Deleted, a3, a2), ev(event.Added, obj("a", "4", "u2"), nil),
		}},
		{name: "final-state-unknown deletion with the last state", wantOK: true, events: []event.Event[cm]{
			ev(event.Added, a1, nil), {Type: event.Deleted, Object: a1, Prior: a1, FinalStateUnknown: true},
		}},
		{name: "addition of a known key", events: []event.Event[cm]{ev(event.Added, a1, nil), ev(event.Added, a2, nil)}},
		{name: "addition with a prior", events: []event.Event[cm]{ev(event.Added, a1, a1)}},
		{name: "modification of an unknown key", events: []event.Event[cm]{ev(event.Modified, a1, nil)}},
		{name: "deletion of an unknown key", events: []event.Event[cm]{ev(event.Deleted, a1, nil)}},
		{name: "modification without a prior", events: []event.Event[cm]{ev(event.Added, a1, nil), ev(event.Modified, a2, nil)}},
		{name: "stale prior", events: []event.Event[cm]{ev(event.Added, a1, nil), ev(event.Modified, a2, a1), ev(event.Modified, a3, a1)}},
		{name: "prior of another incarnation", events: []event.Event[cm]{ev(event.Added, a1, nil), ev(event.Modified, a2, obj("a", "1", "other"))}},
		{name: "resource version going back", events: []event.Event[cm]{ev(event.Added, a2, nil), ev(event.Modified, a1, a2)}},
		{name: "resource version going back across a re-creation", events: []event.Event[cm]{
			ev(event.Added, a2, nil), ev(event.Deleted, a3, a2), ev(event.Added, obj("a", "1", "u2"), nil),
		}},
		{name: "final-state-unknown deletion with another state", events: []event.Event[cm]{
			ev(event.Added, a1, nil), ev(event.Modified, a2, a1), {Type: event.Deleted, Object: a1, Prior: a2, FinalStateUnknown: true},
		}},
		{name: "no object", events: []event.Event[cm]{{Type: event.Added}}},
		{name: "invalid type", events: []event.Event[cm]{{Object: a1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newChecker[cm]("test")
			for _, e := range tt.events {
				c.Handle(context.Background(), e)
			}
			if ok := len(c.problems) == 0; ok != tt.wantOK {
				t.Errorf("consistent = %v, want %v; problems: %q", ok, tt.wantOK, c.problems)
			}
		})
	}
}
