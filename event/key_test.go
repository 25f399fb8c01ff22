package event_test

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/fuzzseed"
)

func TestObjectKey(t *testing.T) {
	tests := []struct {
		name    string
		obj     *corev1.ConfigMap
		want    string
		wantErr error
	}{
		{name: "namespaced object", obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}, want: "ns/a"},
		{name: "cluster-scoped object", obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, want: "a"},
		{name: "nil object", obj: nil, wantErr: event.ErrNilObject},
		{name: "object with no name", obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}}, wantErr: event.ErrNoName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := event.ObjectKey(tt.obj)
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("ObjectKey() = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// FuzzObjectKey checks that any namespace and name give a key or a clear error, never a
// panic, and that SplitKey inverts ObjectKey for names without a slash.
func FuzzObjectKey(f *testing.F) {
	fuzzseed.Add(f, "FuzzObjectKey")
	f.Fuzz(func(t *testing.T, ns, name string) {
		key, err := event.ObjectKey(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		if name == "" {
			if !errors.Is(err, event.ErrNoName) {
				t.Fatalf("no name: err = %v, want ErrNoName", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("ObjectKey(%q, %q): %v", ns, name, err)
		}
		gotNS, gotName := event.SplitKey(key)
		for _, r := range ns + name {
			if r == '/' {
				return // names and namespaces never contain a slash on a real server
			}
		}
		if gotNS != ns || gotName != name {
			t.Fatalf("SplitKey(%q) = %q, %q; want %q, %q", key, gotNS, gotName, ns, name)
		}
	})
}

func TestUIDNote(t *testing.T) {
	const uuid = "6f1c9a3e-0a5b-4c1e-9d5e-2b7f4c3a1d0f"
	want := [16]byte{0x6f, 0x1c, 0x9a, 0x3e, 0x0a, 0x5b, 0x4c, 0x1e, 0x9d, 0x5e, 0x2b, 0x7f, 0x4c, 0x3a, 0x1d, 0x0f}
	if note, ok := event.UIDNote(uuid); !ok || note != want {
		t.Errorf("UIDNote(%q) = %x, %v; want %x, true", uuid, note, ok, want)
	}
	for _, uid := range []types.UID{
		"",
		"uid-1",
		"00000000-0000-0000-0000-000000000000",  // the nil UUID: its note would mean none
		"6F1C9A3E-0A5B-4C1E-9D5E-2B7F4C3A1D0F",  // upper case: another string, the same bytes
		"6f1c9a3e-0a5b-4c1e-9d5e-2b7f4c3a1d0",   // too short
		"6f1c9a3e-0a5b-4c1e-9d5e-2b7f4c3a1d0f0", // too long
		"6f1c9a3e00a5b-4c1e-9d5e-2b7f4c3a1d0f",  // a digit where a dash goes
		"6f1c9a3e-0a5b-4c1e-9d5e-2b7f4c3a1d0g",  // not hex
		"{6f1c9a3e-0a5b-4c1e-9d5e-2b7f4c3a1d}",
	} {
		if note, ok := event.UIDNote(uid); ok || note != ([16]byte{}) {
			t.Errorf("UIDNote(%q) = %x, %v; want no note", uid, note, ok)
		}
	}
}

// FuzzUIDNote checks the promise the cache relies on, that two UIDs with notes are
// equal exactly when their notes are: a UID with a note is the note written back as a
// canonical UUID, so no two UIDs share one.
func FuzzUIDNote(f *testing.F) {
	f.Add("6f1c9a3e-0a5b-4c1e-9d5e-2b7f4c3a1d0f")
	f.Add("6F1C9A3E-0A5B-4C1E-9D5E-2B7F4C3A1D0F")
	f.Add("00000000-0000-0000-0000-000000000001")
	f.Add("uid-1")
	f.Fuzz(func(t *testing.T, uid string) {
		note, ok := event.UIDNote(types.UID(uid))
		if !ok {
			if note != ([16]byte{}) {
				t.Errorf("UIDNote(%q) = %x, false: want the zero note", uid, note)
			}
			return
		}
		if back := fmt.Sprintf("%x-%x-%x-%x-%x", note[:4], note[4:6], note[6:8], note[8:10], note[10:]); back != uid {
			t.Errorf("UIDNote(%q) = %x, which is the UID %q", uid, note, back)
		}
	})
}

func TestOtherObject(t *testing.T) {
	for _, tc := range []struct {
		a, b types.UID
		want bool
	}{
		{"uid-1", "uid-2", true},
		{"uid-1", "uid-1", false},
		{"", "uid-1", false}, // no UID: taken to be the same object
		{"uid-1", "", false},
		{"", "", false},
	} {
		a := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: tc.a}}
		b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: tc.b}}
		if got := event.OtherObject(a, b); got != tc.want {
			t.Errorf("OtherObject(uid %q, uid %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
