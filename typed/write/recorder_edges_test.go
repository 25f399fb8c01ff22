package write_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/typedinformer/typedinformer/typed/write"
)

// TestRecorderDropsEventsAboutTypedNilObjects: an event about a typed-nil object (a
// reconciler's "(*Pod)(nil)") is logged and dropped, and a typed-nil related object is
// none: never a panic, neither in the caller nor, for an event recorded before Run, on
// Run's goroutine, where it ended the process (client-go's reference.GetReference reads
// the object's kind).
func TestRecorderDropsEventsAboutTypedNilObjects(t *testing.T) {
	cs := kubefake.NewClientset()
	rec, err := write.NewRecorder(cs, "website-operator")
	if err != nil {
		t.Fatal(err)
	}
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings", UID: "uid-settings"}}
	rec.Eventf((*corev1.ConfigMap)(nil), nil, corev1.EventTypeNormal, "Early", "Start", "about nothing, before Run")
	stop := runRecorder(t, rec)
	rec.Eventf((*corev1.ConfigMap)(nil), settings, corev1.EventTypeNormal, "Late", "Start", "about nothing, while running")
	rec.Eventf(settings, (*corev1.ConfigMap)(nil), corev1.EventTypeNormal, "Synced", "Sync", "related to nothing")
	got := summarize(eventsIn(t, cs, "shop", 1))
	if len(got) != 1 || got[0].Reason != "Synced" || got[0].Related != (corev1.ObjectReference{}) {
		t.Errorf("events %+v, want only Synced, with no related object", got)
	}
	stop()
}
