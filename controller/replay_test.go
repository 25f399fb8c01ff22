package controller_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/internal/testsupport/watchrecord"
	"github.com/typedinformer/typedinformer/reflect"
)

func loadRecording(t *testing.T) (watchrecord.Recording, []watch.Event) {
	t.Helper()
	rec, events, err := watchrecord.Load(filepath.Join("..", "testdata", "watch", "configmaps.json"))
	if err != nil {
		t.Fatal(err)
	}
	return rec, events
}

// replay serves a recording: the first List returns the recorded list and later ones the
// final state; the first Watch streams the recorded events (the first cut of them followed
// by a 410 Gone ERROR event, when cut is set) once start is closed, and later watches stay
// open and quiet.
type replay struct {
	rec    watchrecord.Recording
	events []watch.Event
	cut    int
	start  chan struct{}

	mu       sync.Mutex
	lists    int
	watchRVs []string
}

func (r *replay) List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists++
	if r.lists == 1 {
		return r.rec.List.DeepCopy(), nil
	}
	return r.rec.Final.DeepCopy(), nil
}

func (r *replay) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watchRVs = append(r.watchRVs, opts.ResourceVersion)
	if len(r.watchRVs) > 1 {
		return watch.NewProxyWatcher(make(chan watch.Event)), nil
	}
	events := r.events
	if r.cut > 0 {
		gone := apierrors.NewResourceExpired("too old resource version").ErrStatus
		events = append(events[:r.cut:r.cut], watch.Event{Type: watch.Error, Object: &gone})
	}
	ch := make(chan watch.Event, len(events))
	go func() {
		defer close(ch)
		select {
		case <-r.start:
		case <-ctx.Done():
			return
		}
		for _, e := range events {
			e.Object = e.Object.DeepCopyObject()
			ch <- e
		}
	}()
	return watch.NewProxyWatcher(ch), nil
}

func (r *replay) calls() (lists int, watchRVs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists, append([]string(nil), r.watchRVs...)
}

// TestReplayOfARecordedWatchStream feeds a list and watch stream recorded from
// kube-apiserver (testdata/watch/configmaps.json, written by internal/cmd/record) through a
// controller, as recorded and cut by 410 Gone halfway, and checks that it ends equal to the
// server's final List, with every event consistent for its handler.
func TestReplayOfARecordedWatchStream(t *testing.T) {
	rec, events := loadRecording(t)
	lastRV := events[len(events)-1].Object.(*corev1.ConfigMap).ResourceVersion
	tests := []struct {
		name      string
		cut       int
		wantLists int
		// wantWatchRVs are the versions the watches start from.
		wantWatchRVs []string
		// wantTypes are the event types these keys get, in order: keys the handler knew
		// before the stream started, so that no compression in its backlog can cancel an
		// event, only merge consecutive modifications.
		wantTypes map[string][]event.Type
	}{
		{
			name:         "as recorded",
			wantLists:    1,
			wantWatchRVs: []string{rec.List.ResourceVersion, lastRV},
			wantTypes: map[string][]event.Type{
				"replay/before-0": {event.Added, event.Modified},
				"replay/before-1": {event.Added, event.Deleted},
			},
		},
		{
			// The cut falls after new-1 was created and before it, and the first
			// before-2, were deleted: the relist must synthesise both deletions, and
			// deliver the re-created before-2 (another UID) as an addition after its
			// predecessor's deletion.
			name:         "cut by 410 Gone halfway",
			cut:          6,
			wantLists:    2,
			wantWatchRVs: []string{rec.List.ResourceVersion, rec.Final.ResourceVersion},
			wantTypes: map[string][]event.Type{
				"replay/before-0": {event.Added, event.Modified},
				"replay/before-1": {event.Added, event.Deleted},
				"replay/before-2": {event.Added, event.Deleted, event.Added},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lw := &replay{rec: rec, events: events, cut: tt.cut, start: make(chan struct{})}
			c := testctl.New(t, lw, controller.Options[obj]{Options: reflect.Options[obj]{OnError: func(context.Context, error) {}}})
			chk := eventcheck.New[obj]("checker")
			reg := mustAdd(t, c, "checker", chk)
			run(t, c)
			<-reg.Synced()
			close(lw.start)
			want := map[string]string{}
			for _, o := range rec.Final.Items {
				want[o.Namespace+"/"+o.Name] = o.ResourceVersion
			}
			var got map[string]string
			err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				got = map[string]string{}
				c.Store().Range(func(k string, o obj) bool { got[k] = o.ResourceVersion; return true })
				_, watchRVs := lw.calls()
				return cmp.Equal(want, got) && cmp.Equal(want, chk.Versions()) && len(watchRVs) == len(tt.wantWatchRVs), nil
			})
			if err != nil {
				t.Fatalf("the cache did not converge on the final List (-final +cache):\n%s", cmp.Diff(want, got))
			}
			chk.Verify(t)
			for key, want := range tt.wantTypes {
				var got []event.Type
				for _, s := range chk.Events(key) {
					if n := len(got); n > 0 && got[n-1] == event.Modified && s.Event.Type == event.Modified {
						continue // consecutive modifications may merge
					}
					got = append(got, s.Event.Type)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: event types (-want +got):\n%s", key, diff)
				}
			}
			if merges := chk.IncarnationMerges(); len(merges) > 0 {
				t.Errorf("a deletion and re-creation were delivered as one modification: %v", merges)
			}
			if tt.cut > 0 {
				for _, s := range chk.Events("replay/new-1") {
					if s.Event.Type == event.Deleted && !s.Event.FinalStateUnknown {
						t.Errorf("replay/new-1 was deleted while the watch was down, but its deletion claims a known final state: %v", s.Event)
					}
				}
			}
			lists, watchRVs := lw.calls()
			if lists != tt.wantLists {
				t.Errorf("%d Lists, want %d", lists, tt.wantLists)
			}
			if diff := cmp.Diff(tt.wantWatchRVs, watchRVs); diff != "" {
				t.Errorf("watches started from (-want +got):\n%s", diff)
			}
		})
	}
}
