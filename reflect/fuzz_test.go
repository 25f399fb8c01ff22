package reflect_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/testsupport/fuzzseed"
	"github.com/typedinformer/typedinformer/reflect"
)

// scriptedLW lists nothing, serves one scripted watch stream, then watches that never end.
// Before that, it answers List and Watch with the scripted faults, in order.
type scriptedLW struct {
	first   chan watch.Event
	watches chan struct{}
	// listFaults and watchFaults are answered, one per call, before the good answers.
	listFaults  []*corev1.ConfigMapList
	watchFaults []watch.Interface
}

func (s *scriptedLW) List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) {
	if len(s.listFaults) > 0 {
		l := s.listFaults[0]
		s.listFaults = s.listFaults[1:]
		return l, nil
	}
	return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
}

func (s *scriptedLW) Watch(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
	if len(s.watchFaults) > 0 {
		w := s.watchFaults[0]
		s.watchFaults = s.watchFaults[1:]
		return w, nil
	}
	select {
	case s.watches <- struct{}{}:
	default:
	}
	if ch := s.first; ch != nil {
		s.first = nil
		return watch.NewProxyWatcher(ch), nil
	}
	return watch.NewProxyWatcher(make(chan watch.Event)), nil
}

// FuzzReflectorWatchEvents sends random watch streams, with events of every type and
// objects of the wrong type, nil and typed-nil objects (in additions, deletions,
// bookmarks and ERROR events), Unreadables (a deletion still deletes), nameless objects
// and ERROR events, through a
// reflector into an event cache, after random faults of the ListerWatcher (typed-nil
// lists, nil and typed-nil watches, watches with no channel). It checks that nothing
// panics and that the cache ends equal to a model that applies the valid events in order
// up to the first ERROR event (which ends the watch).
func FuzzReflectorWatchEvents(f *testing.F) {
	fuzzseed.Add(f, "FuzzReflectorWatchEvents")
	f.Fuzz(func(t *testing.T, script []byte) {
		var events []watch.Event
		var listFaults []*corev1.ConfigMapList
		var watchFaults []watch.Interface
		model := map[string]string{}
		rv := 1
	script:
		for i := 0; i+1 < len(script); i += 2 {
			op, arg := script[i]%16, script[i+1]
			name := "cm-" + strconv.Itoa(int(arg%4))
			rv++
			o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: strconv.Itoa(rv)}}
			switch op {
			case 0, 1:
				events = append(events, watch.Event{Type: []watch.EventType{watch.Added, watch.Modified}[op], Object: o})
				model["ns/"+name] = o.ResourceVersion
			case 2:
				events = append(events, watch.Event{Type: watch.Deleted, Object: o})
				delete(model, "ns/"+name)
			case 3:
				events = append(events, watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: o.ResourceVersion}}})
			case 4:
				events = append(events, watch.Event{Type: watch.Added, Object: &corev1.Secret{ObjectMeta: o.ObjectMeta}})
			case 5:
				events = append(events, watch.Event{Type: watch.Modified})
			case 6:
				o.Name = ""
				events = append(events, watch.Event{Type: watch.Added, Object: o})
			case 7:
				events = append(events, watch.Event{Type: "BOGUS", Object: o})
			case 8:
				events = append(events, watch.Event{Type: watch.Deleted, Object: (*corev1.ConfigMap)(nil)})
			case 9:
				events = append(events, watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Code: 500, Message: "fuzz"}})
				break script
			case 10:
				events = append(events, watch.Event{Type: watch.Bookmark, Object: []runtime.Object{nil, (*corev1.ConfigMap)(nil), (*metav1.Status)(nil), &reflect.Unreadable{}}[arg%4]})
			case 11:
				// An object the ListerWatcher could not read: the cached state stays, unless
				// the server said it was deleted.
				typ := []watch.EventType{watch.Added, watch.Modified, watch.Deleted}[arg%3]
				events = append(events, watch.Event{Type: typ, Object: &reflect.Unreadable{Object: o, Err: errors.New("fuzz")}})
				if typ == watch.Deleted {
					delete(model, "ns/"+name)
				}
			case 12:
				events = append(events, watch.Event{Type: watch.Added, Object: []runtime.Object{nil, (*corev1.ConfigMap)(nil), (*reflect.Unreadable)(nil), (*corev1.Secret)(nil)}[arg%4]})
			case 13:
				events = append(events, watch.Event{Type: watch.Error, Object: []runtime.Object{nil, (*metav1.Status)(nil), (*corev1.ConfigMap)(nil), o}[arg%4]})
				break script
			case 14:
				listFaults = append(listFaults, nil)
			case 15:
				watchFaults = append(watchFaults, []watch.Interface{nil, (*watch.FakeWatcher)(nil), nilChanWatch{}, (*watch.RaceFreeFakeWatcher)(nil)}[arg%4])
			}
		}
		ch := make(chan watch.Event, len(events))
		for _, e := range events {
			ch <- e
		}
		close(ch)
		lw := &scriptedLW{first: ch, watches: make(chan struct{}, 100), listFaults: listFaults, watchFaults: watchFaults}

		w := eventcache.NewWriter[*corev1.ConfigMap](nil)
		c := eventcache.NewEventQueueCollection(w.Store(), eventcache.Options[*corev1.ConfigMap]{})
		rtc := eventcache.NewResourceTrackingConsumer[*corev1.ConfigMap](w, nopSink{}, nil)
		r := reflect.New[*corev1.ConfigMap, *corev1.ConfigMapList](lw, c, reflect.Options[*corev1.ConfigMap]{
			OnError: func(context.Context, error) {}, Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 20},
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = c.Drain(ctx, rtc) }()
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()
		<-lw.watches // the scripted watch
		<-lw.watches // the next one: the script has been read
		deadline := time.After(10 * time.Second)
		for {
			got := map[string]string{}
			w.Store().Range(func(k string, o *corev1.ConfigMap) bool { got[k] = o.ResourceVersion; return true })
			if c.Len() == 0 && cmp.Equal(model, got) {
				break
			}
			select {
			case <-deadline:
				t.Fatalf("the cache does not match the model (-model +cache):\n%s", cmp.Diff(model, got))
			case <-time.After(time.Millisecond):
			}
		}
		cancel()
		<-done
	})
}

type nopSink struct{}

func (nopSink) Deliver([]event.Event[*corev1.ConfigMap]) {}
