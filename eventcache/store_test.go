package eventcache

import (
	"errors"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// byData indexes ConfigMaps by their "team" data value; "fail" is an index error.
func byData(o obj) ([]string, error) {
	switch team := o.Data["team"]; team {
	case "":
		return nil, nil
	case "fail":
		return nil, errors.New("cannot index")
	default:
		return []string{team}, nil
	}
}

func withTeam(name, rv, team string) obj {
	o := cm(name, rv)
	o.Data = map[string]string{"team": team}
	return o
}

func names(objs []obj) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.Name)
	}
	sort.Strings(out)
	return out
}

func TestAddIndexersIndexesWhatIsStoredAndKeepsItUpToDate(t *testing.T) {
	tests := []struct {
		name     string
		add      Indexers[obj]
		wantErr  error
		wantRed  []string // ByIndex("team", "red") after the index is added and "c" set
		wantNone bool     // the index must not exist afterwards
	}{
		{name: "a new index", add: Indexers[obj]{"team": byData}, wantRed: []string{"a", "c"}},
		{name: "a name taken by an index", add: Indexers[obj]{"team": byData, "existing": byData}, wantErr: ErrIndexExists, wantNone: true},
		{name: "the namespace index's name", add: Indexers[obj]{NamespaceIndex: byData}, wantErr: ErrIndexExists, wantNone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWriter(Indexers[obj]{"existing": byData})
			for _, o := range []obj{withTeam("a", "1", "red"), withTeam("b", "2", "blue")} {
				if _, _, err := w.Set("ns/"+o.Name, o); err != nil {
					t.Fatal(err)
				}
			}
			err := w.AddIndexers(tt.add)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("AddIndexers: %v, want %v", err, tt.wantErr)
			}
			if _, _, err := w.Set("ns/c", withTeam("c", "3", "red")); err != nil {
				t.Fatal(err)
			}
			red, err := w.Store().ByIndex("team", "red")
			if tt.wantNone {
				if !errors.Is(err, ErrNoIndex) {
					t.Errorf("ByIndex on an index that was not added: %v, want ErrNoIndex", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantRed, names(red)); diff != "" {
				t.Errorf("ByIndex(team, red) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAddIndexersReportsIndexErrorsAndIndexesTheRest(t *testing.T) {
	w := NewWriter[obj](nil)
	for _, o := range []obj{withTeam("a", "1", "red"), withTeam("b", "2", "fail")} {
		if _, _, err := w.Set("ns/"+o.Name, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AddIndexers(Indexers[obj]{"team": byData}); err == nil {
		t.Error("AddIndexers returned no error for an object its index function failed on")
	}
	red, err := w.Store().ByIndex("team", "red")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a"}, names(red)); diff != "" {
		t.Errorf("ByIndex(team, red) (-want +got):\n%s", diff)
	}
}

// TestWriterMutationDetector: an object changed in place is found when it is replaced,
// when it is deleted, and by CheckMutations; the detector off is an error, not silence.
func TestWriterMutationDetector(t *testing.T) {
	w := NewWriter[obj](nil)
	if err := w.CheckMutations(); !errors.Is(err, ErrMutationDetectorOff) {
		t.Errorf("CheckMutations with the detector off: %v, want ErrMutationDetectorOff", err)
	}
	w.DetectMutations()
	for _, name := range []string{"replaced", "deleted", "kept"} {
		if _, _, err := w.Set("ns/"+name, cm(name, "1")); err != nil {
			t.Fatal(err)
		}
		o, _ := w.Store().Get("ns/" + name)
		o.Data = map[string]string{"changed": "in place"}
	}
	if _, _, err := w.Set("ns/replaced", cm("replaced", "2")); err != nil {
		t.Fatal(err)
	}
	w.Delete("ns/deleted")
	var keys []string
	for _, err := range w.takeMutations() {
		var m *MutationError
		if errors.As(err, &m) {
			keys = append(keys, m.Key)
		}
	}
	var m *MutationError
	if err := w.CheckMutations(); errors.As(err, &m) {
		keys = append(keys, m.Key)
	}
	if diff := cmp.Diff([]string{"ns/replaced", "ns/deleted", "ns/kept"}, keys); diff != "" {
		t.Errorf("mutations found (-want +got):\n%s", diff)
	}
	if w.takeMutations() != nil {
		t.Error("mutations taken twice")
	}
}
