package eventcheck_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
)

type cm = *corev1.ConfigMap

// TestCheckerFlagsInconsistentEvents makes sure the checking handler that the fuzz,
// fault and end-to-end tests rely on is not vacuous: it accepts a consistent sequence and
// flags each kind of inconsistency, received as a handler or as a sink.
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
			handler, sink := eventcheck.New[cm]("handler"), eventcheck.New[cm]("sink")
			for _, e := range tt.events {
				handler.Handle(context.Background(), e)
				e.Key = "ns/a"
				sink.Deliver([]event.Event[*corev1.ConfigMap]{e})
			}
			if ok := len(handler.Problems()) == 0; ok != tt.wantOK {
				t.Errorf("as a handler: consistent = %v, want %v; problems: %q", ok, tt.wantOK, handler.Problems())
			}
			if ok := len(sink.Problems()) == 0; ok != tt.wantOK {
				t.Errorf("as a sink: consistent = %v, want %v; problems: %q", ok, tt.wantOK, sink.Problems())
			}
		})
	}
}

func TestCheckerKeepsTheStateAndHistory(t *testing.T) {
	obj := func(name, rv string) cm {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	a1, a2, b3 := obj("a", "1"), obj("a", "2"), obj("b", "3")
	c := eventcheck.New[cm]("h")
	for _, e := range []event.Event[cm]{
		{Type: event.Added, Object: a1},
		{Type: event.Added, Object: b3},
		{Type: event.Modified, Object: a2, Prior: a1},
		{Type: event.Deleted, Object: b3, Prior: b3},
	} {
		c.Handle(context.Background(), e)
	}
	c.Verify(t)
	if diff := cmp.Diff(map[string]string{"ns/a": "2"}, c.Versions()); diff != "" {
		t.Errorf("Versions() (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]cm{"ns/a": a2}, c.Known()); diff != "" {
		t.Errorf("Known() (-want +got):\n%s", diff)
	}
	wantB := []eventcheck.Step[cm]{{Seq: 2, Event: event.Event[cm]{Type: event.Added, Object: b3}},
		{Seq: 4, Event: event.Event[cm]{Type: event.Deleted, Object: b3, Prior: b3}}}
	if diff := cmp.Diff(wantB, c.Events("ns/b")); diff != "" {
		t.Errorf("Events(ns/b) (-want +got):\n%s", diff)
	}
	if got := c.EventsSince("ns/a", 1); len(got) != 1 || got[0].Object != a2 || c.Count() != 4 {
		t.Errorf("EventsSince(ns/a, 1) = %v, Count() = %d; want the modification to 2 and 4 events", got, c.Count())
	}
}
