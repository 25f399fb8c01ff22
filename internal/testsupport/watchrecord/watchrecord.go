// Package watchrecord holds the format of the recordings in testdata/watch: a List of
// ConfigMaps, the watch stream that followed it and a fresh List of the final state, as a
// real kube-apiserver served them. internal/cmd/record writes them; replay tests read them.
package watchrecord

import (
	"encoding/json"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Recording is one recording, as stored (JSON).
type Recording struct {
	// Description says what was recorded and how.
	Description string `json:"description"`
	// List is the List the watch started from.
	List corev1.ConfigMapList `json:"list"`
	// Events are the watch events after List, in order, in their wire form.
	Events []metav1.WatchEvent `json:"events"`
	// Final is a fresh List taken after the last event.
	Final corev1.ConfigMapList `json:"final"`
}

// Encode returns e in its wire form, for Recording.Events.
func Encode(e watch.Event) (metav1.WatchEvent, error) {
	obj, ok := e.Object.(*corev1.ConfigMap)
	if !ok {
		return metav1.WatchEvent{}, fmt.Errorf("watch event %s carries %T, want a ConfigMap", e.Type, e.Object)
	}
	obj = obj.DeepCopy()
	obj.APIVersion, obj.Kind = "v1", "ConfigMap"
	raw, err := json.Marshal(obj)
	if err != nil {
		return metav1.WatchEvent{}, err
	}
	return metav1.WatchEvent{Type: string(e.Type), Object: runtime.RawExtension{Raw: raw}}, nil
}

// Load reads the recording at path and returns it with its events decoded. It fails on a
// recording with no listed object, no event or no object in the final List, which could
// replay nothing.
func Load(path string) (Recording, []watch.Event, error) {
	var rec Recording
	b, err := os.ReadFile(path)
	if err != nil {
		return rec, nil, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, nil, fmt.Errorf("%s: %w", path, err)
	}
	events := make([]watch.Event, 0, len(rec.Events))
	for i, e := range rec.Events {
		obj := &corev1.ConfigMap{}
		if err := json.Unmarshal(e.Object.Raw, obj); err != nil {
			return rec, nil, fmt.Errorf("%s: event %d: %w", path, i, err)
		}
		events = append(events, watch.Event{Type: watch.EventType(e.Type), Object: obj})
	}
	if len(rec.List.Items) == 0 || len(events) == 0 || len(rec.Final.Items) == 0 {
		return rec, nil, fmt.Errorf("%s is incomplete: %d listed, %d events, %d in the final list",
			path, len(rec.List.Items), len(events), len(rec.Final.Items))
	}
	return rec, events, nil
}
