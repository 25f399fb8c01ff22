package write_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/typed/write"
)

// runRecorder runs rec until the returned stop is called, which checks that Run returned
// nil and left no goroutine behind.
func runRecorder(t *testing.T, rec *write.Recorder) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := testwait.Recv(t, done, "Run returns once its context ends"); err != nil {
			t.Errorf("Run returned %v", err)
		}
		goleak.VerifyNone(t)
	}
}

// eventsIn waits until the fake holds n events in namespace and returns them, by reason.
func eventsIn(t *testing.T, cs *kubefake.Clientset, namespace string, n int) []eventsv1.Event {
	t.Helper()
	var got []eventsv1.Event
	testwait.Eventually(t, "the events to be written", func() bool {
		l, err := cs.EventsV1().Events(namespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = l.Items
		return len(got) >= n
	}, testwait.Timeout)
	slices.SortFunc(got, func(a, b eventsv1.Event) int { return strings.Compare(a.Reason, b.Reason) })
	return got
}

// eventSummary is what the tests compare of an event: everything the caller decided.
type eventSummary struct {
	Regarding, Related  corev1.ObjectReference
	Type, Reason        string
	Action, Note        string
	ReportingController string
}

func summarize(evs []eventsv1.Event) []eventSummary {
	var out []eventSummary
	for _, e := range evs {
		s := eventSummary{Regarding: e.Regarding, Type: e.Type, Reason: e.Reason, Action: e.Action, Note: e.Note, ReportingController: e.ReportingController}
		if e.Related != nil {
			s.Related = *e.Related
		}
		out = append(out, s)
	}
	return out
}

func TestRecorderWritesEventsThroughEventsV1(t *testing.T) {
	cs := kubefake.NewClientset()
	rec, err := write.NewRecorder(cs, "website-operator")
	if err != nil {
		t.Fatal(err)
	}
	stop := runRecorder(t, rec)
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings", UID: "uid-settings"}}
	gadget := &Gadget{TypeMeta: gadgetMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "g", UID: "uid-g"}}

	rec.Eventf(settings, nil, corev1.EventTypeNormal, "Synced", "Sync", "synced %d keys", 3)
	rec.WithLogger(ktesting.NewLogger(t, ktesting.NewConfig())).Eventf(gadget, settings, corev1.EventTypeWarning, "Failed", "Configure", "could not read %s", settings.Name)

	want := []eventSummary{{
		// A custom resource's kind comes from its TypeMeta.
		Regarding: corev1.ObjectReference{APIVersion: "example.com/v1", Kind: "Gadget", Namespace: "shop", Name: "g", UID: "uid-g"},
		Related:   corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "settings", UID: "uid-settings"},
		Type:      corev1.EventTypeWarning, Reason: "Failed", Action: "Configure", Note: "could not read settings",
		ReportingController: "website-operator",
	}, {
		// A built-in kind's comes from client-go's scheme: typed clients' objects have no TypeMeta.
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "settings", UID: "uid-settings"},
		Type:      corev1.EventTypeNormal, Reason: "Synced", Action: "Sync", Note: "synced 3 keys",
		ReportingController: "website-operator",
	}}
	if diff := cmp.Diff(want, summarize(eventsIn(t, cs, "shop", 2))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	stop()
}

func TestRecorderWritesEventsRecordedBeforeRunOnceItRuns(t *testing.T) {
	cs := kubefake.NewClientset()
	rec, err := write.NewRecorder(cs, "website-operator")
	if err != nil {
		t.Fatal(err)
	}
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings"}}
	rec.Eventf(settings, nil, corev1.EventTypeNormal, "Early", "Start", "before Run")
	if calls := apiCalls(&cs.Fake); len(calls) != 0 {
		t.Errorf("API calls before Run: %v", calls)
	}

	stop := runRecorder(t, rec)
	if got := summarize(eventsIn(t, cs, "shop", 1)); len(got) != 1 || got[0].Note != "before Run" {
		t.Errorf("events %+v, want the one recorded before Run", got)
	}
	stop()
}

func TestRecorderRunsOnceAtATimeAndAgainAfterItReturns(t *testing.T) {
	rec, err := write.NewRecorder(kubefake.NewClientset(), "website-operator")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- rec.Run(ctx) }()
	}
	if err := testwait.Recv(t, done, "one of two Runs at once to be refused"); !errors.Is(err, controller.ErrAlreadyRunning) {
		t.Errorf("the first Run to return returned %v, want ErrAlreadyRunning", err)
	}
	cancel()
	if err := testwait.Recv(t, done, "the other Run to return once its context ends"); err != nil {
		t.Errorf("the running Run returned %v", err)
	}
	goleak.VerifyNone(t)
	stop := runRecorder(t, rec) // and it runs again
	stop()
}

func TestNewRecorderRefusesBadInput(t *testing.T) {
	var nilClientset *kubefake.Clientset
	tests := []struct {
		name      string
		client    *kubefake.Clientset
		component string
		nilArg    bool
	}{
		{"a nil client", nilClientset, "website-operator", true},
		{"an empty component", kubefake.NewClientset(), "", false},
		{"a component that is not a qualified name", kubefake.NewClientset(), "Website Operator", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := write.NewRecorder(tt.client, tt.component)
			if err == nil || rec != nil {
				t.Fatalf("NewRecorder = %v, %v; want an error", rec, err)
			}
			if errors.Is(err, controller.ErrNilArgument) != tt.nilArg {
				t.Errorf("error %v: wraps ErrNilArgument is %v, want %v", err, !tt.nilArg, tt.nilArg)
			}
		})
	}
	var nilRecorder *write.Recorder
	if err := nilRecorder.Run(t.Context()); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Run of a nil Recorder returned %v, want ErrNilArgument", err)
	}
	nilRecorder.Eventf(nil, nil, corev1.EventTypeNormal, "R", "A", "a nil Recorder records nothing and does not panic")
}
