package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/client"
)

// scriptedServer answers the widgets of namespace ns as a kube-apiserver would, with what
// a test scripts: each list request takes the next body from lists, each watch request
// the next channel from watches, whose lines it streams until the channel closes.
type scriptedServer struct {
	lists   chan string
	watches chan chan string
	queries chan string // every request's query, for the test to check
}

func newScriptedServer(t *testing.T) (*scriptedServer, *rest.Config) {
	s := &scriptedServer{lists: make(chan string, 10), watches: make(chan chan string, 10), queries: make(chan string, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/example.com/v1/namespaces/ns/widgets" {
			http.NotFound(w, r)
			return
		}
		select {
		case s.queries <- r.URL.RawQuery:
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			select {
			case body := <-s.lists:
				_, _ = fmt.Fprint(w, body)
			case <-r.Context().Done():
			}
			return
		}
		var lines chan string
		select {
		case lines = <-s.watches:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					return
				}
				_, _ = fmt.Fprintln(w, line)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return s, &rest.Config{Host: srv.URL}
}

// widgetJSON is a widget as the server sends it; size is JSON, so that a test can send a
// string where *Widget has a number.
func widgetJSON(name, rv, size string) string {
	return fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"ns","name":%q,"resourceVersion":%q,"uid":"uid-%s","creationTimestamp":"2026-11-27T10:00:00Z"},"spec":{"size":%s,"tags":["a","b"]}}`, name, rv, name, size)
}

func widgetList(rv string, items ...string) string {
	return fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"WidgetList","metadata":{"resourceVersion":%q},"items":[%s]}`, rv, strings.Join(items, ","))
}

func watchEvent(typ, object string) string {
	return fmt.Sprintf(`{"type":%q,"object":%s}`, typ, object)
}

// TestForResourceKeepsTheGuaranteesOfConversion attacks DESIGN 18 and 15 on the direct
// decoder: a widget whose JSON does not decode into *Widget, in a list, in a watch event
// and in a deletion, and a watch stream that is not JSON at all. Each is reported to the
// controller's error handler naming the widget; the cache keeps the last state that
// decoded; nothing live is reported deleted; a deletion the server announces for an
// undecodable widget is delivered with its last known state.
func TestForResourceKeepsTheGuaranteesOfConversion(t *testing.T) {
	srv, cfg := newScriptedServer(t)
	widgets, err := client.ForResource[*Widget](cfg, widgets)
	if err != nil {
		t.Fatal(err)
	}
	errs := &errorLog{changed: make(chan struct{}, 1)}
	c := testctl.New(t, widgets("ns"), controller.Options[*Widget]{Options: reflect.Options[*Widget]{
		OnError: errs.add,
		Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 20},
	}})
	events := make(chan event.Event[*Widget], 100)
	if _, err := c.AddHandler("recorder", controller.HandlerFunc[*Widget](func(_ context.Context, e event.Event[*Widget]) { events <- e })); err != nil {
		t.Fatal(err)
	}
	noDeletionUntil := func(what string, done func(event.Event[*Widget]) bool) {
		t.Helper()
		for {
			e := testwait.Recv(t, events, what)
			if e.Type == event.Deleted {
				t.Fatalf("%s delivered while waiting for %s: a live widget was reported deleted", e, what)
			}
			if done(e) {
				return
			}
		}
	}
	size := func(name string) int {
		t.Helper()
		w, ok := c.Store().GetByName("ns", name)
		if !ok {
			t.Fatalf("%s is not cached", name)
		}
		return w.Spec.Size
	}

	// The first list: a widget with a string for its size is left out and named.
	srv.lists <- widgetList("10", widgetJSON("small", "5", "1"), widgetJSON("bad", "6", `"x"`), widgetJSON("big", "7", "9"))
	first := make(chan string)
	srv.watches <- first
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]WidgetSpec{}
	for _, w := range c.Store().List() {
		got[w.Name] = w.Spec
	}
	if diff := cmp.Diff(map[string]WidgetSpec{"small": {Size: 1, Tags: []string{"a", "b"}}, "big": {Size: 9, Tags: []string{"a", "b"}}}, got); diff != "" {
		t.Errorf("cached widgets (-want +got):\n%s", diff)
	}
	if err := errs.waitFor(t, reflect.ErrIncompleteList, "the incomplete list"); !strings.Contains(err.Error(), "ns/bad") {
		t.Errorf("error = %v, want it to name ns/bad", err)
	}
	big, _ := c.Store().GetByName("ns", "big")
	if big.Kind != "Widget" || big.UID != "uid-big" || big.CreationTimestamp.IsZero() {
		t.Errorf("big decoded as %+v, want its kind, uid and creation time", big.TypeMeta)
	}

	// On the watch: an undecodable modification is reported and skipped.
	first <- watchEvent("MODIFIED", widgetJSON("big", "11", `"not a number"`))
	first <- watchEvent("MODIFIED", widgetJSON("small", "12", "2"))
	noDeletionUntil("small's modification", func(e event.Event[*Widget]) bool { return e.Object.Name == "small" && e.Object.Spec.Size == 2 })
	if err := errs.waitFor(t, reflect.ErrUnexpectedObject, "the undecodable watch event"); !strings.Contains(err.Error(), "Widget ns/big") {
		t.Errorf("error = %v, want it to name Widget ns/big", err)
	}
	if got := size("big"); got != 9 {
		t.Errorf("cached big has size %d, want 9, the last state that decoded", got)
	}

	// A stream that is not JSON ends the watch with an error; the next watch goes on. (One
	// cut short ends it quietly, as a closed connection, as client-go's decoder does.)
	second := make(chan string)
	srv.watches <- second
	first <- `{"type":"MODIFIED","object":<html>proxy error</html>`
	close(first)
	if err := errs.waitFor(t, reflect.ErrWatchEvent, "the broken stream"); !strings.Contains(err.Error(), "unable to decode an event from the watch stream") {
		t.Errorf("error = %v, want the stream's decoding error", err)
	}

	// 410 Gone on the watch: the relist has big undecodable, and deletes nothing.
	srv.lists <- widgetList("20", widgetJSON("small", "12", "2"), widgetJSON("big", "13", `{"no":"number"}`))
	third := make(chan string)
	srv.watches <- third
	second <- watchEvent("ERROR", `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 11 (15)","reason":"Expired","code":410}`)
	noDeletionUntil("the relist's synchronization of small", func(e event.Event[*Widget]) bool { return e.Sync && e.Object.Name == "small" })
	for _, err := range errs.all() {
		if errors.Is(err, reflect.ErrIncompleteList) && strings.Contains(err.Error(), "ns/big") {
			goto relisted
		}
	}
	t.Fatalf("errors %v: none names big's undecodable item on the relist", errs.all())
relisted:
	if got := size("big"); got != 9 {
		t.Errorf("cached big has size %d, want 9, the last state that decoded", got)
	}

	// Deleted while it does not decode: the deletion is delivered with the last state.
	third <- watchEvent("DELETED", widgetJSON("big", "21", `"gone"`))
	expectBigDeleted(t, events, c.Store(), 9)
}

// A list response that is not JSON fails the List as a whole, never as an incomplete
// list the reflector would replace the cache with; so does one that is cut short.
func TestForResourceListThatIsNotJSONFails(t *testing.T) {
	for name, body := range map[string]string{
		"cut short":          widgetList("1", widgetJSON("a", "1", "1"))[:120],
		"not JSON":           "<html>proxy error</html>",
		"items not an array": `{"kind":"WidgetList","items":{"a":1}}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv, cfg := newScriptedServer(t)
			widgets, err := client.ForResource[*Widget](cfg, widgets)
			if err != nil {
				t.Fatal(err)
			}
			srv.lists <- body
			l, err := widgets("ns").List(t.Context(), metav1.ListOptions{})
			if err == nil || l != nil || errors.Is(err, reflect.ErrIncompleteList) {
				t.Errorf("List = %v, %v; want no list and an error that is not an incomplete list", l, err)
			}
		})
	}
}

// The list and the watch send the reflector's options to the server, and the list's
// metadata arrives with its items.
func TestForResourceSendsTheOptionsAndDecodesTheListMetadata(t *testing.T) {
	srv, cfg := newScriptedServer(t)
	widgets, err := client.ForResource[*Widget](cfg, widgets)
	if err != nil {
		t.Fatal(err)
	}
	srv.lists <- `{"kind":"WidgetList","apiVersion":"example.com/v1","unknown":[1,{"x":2}],"metadata":{"resourceVersion":"42","continue":"next","remainingItemCount":3},"items":null}`
	l, err := widgets("ns").List(t.Context(), metav1.ListOptions{LabelSelector: "a=b", Limit: 2, ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if l.ResourceVersion != "42" || l.Continue != "next" || l.RemainingItemCount == nil || *l.RemainingItemCount != 3 || l.Kind != "WidgetList" || len(l.Items) != 0 {
		t.Errorf("list = %+v, want its metadata and no items", l)
	}
	if q := testwait.Recv(t, srv.queries, "the list's query"); q != "labelSelector=a%3Db&limit=2&resourceVersion=0" {
		t.Errorf("list query = %q", q)
	}
	lines := make(chan string)
	srv.watches <- lines
	w, err := widgets("ns").Watch(t.Context(), metav1.ListOptions{ResourceVersion: "42", AllowWatchBookmarks: true, SendInitialEvents: new(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if q := testwait.Recv(t, srv.queries, "the watch's query"); q != "allowWatchBookmarks=true&resourceVersion=42&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=true" {
		t.Errorf("watch query = %q", q)
	}
	lines <- watchEvent("BOOKMARK", `{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"resourceVersion":"43","annotations":{"k8s.io/initial-events-end":"true"}}}`)
	e := testwait.Recv(t, w.ResultChan(), "the bookmark")
	if b, ok := e.Object.(*Widget); !ok || e.Type != "BOOKMARK" || b.ResourceVersion != "43" || b.Annotations["k8s.io/initial-events-end"] != "true" {
		t.Errorf("event = %s %#v, want the bookmark as a *Widget", e.Type, e.Object)
	}
	// An object before its type, and an unknown field, are read all the same.
	lines <- fmt.Sprintf(`{"object":%s,"extra":[1],"type":"MODIFIED"}`, widgetJSON("w", "44", "3"))
	if e := testwait.Recv(t, w.ResultChan(), "the event with its object first"); e.Type != "MODIFIED" || e.Object.(*Widget).Spec.Size != 3 {
		t.Errorf("event = %s %#v, want w modified with size 3", e.Type, e.Object)
	}
	// A type that no watch event has ends the watch with an error.
	lines <- watchEvent("RENAMED", widgetJSON("w", "45", "3"))
	if e := testwait.Recv(t, w.ResultChan(), "the event of an unknown type"); e.Type != "ERROR" || !strings.Contains(fmt.Sprint(e.Object), "RENAMED") {
		t.Errorf("event = %s %#v, want an ERROR naming the type", e.Type, e.Object)
	}
}

func TestForResourceRefusesNil(t *testing.T) {
	if _, err := client.ForResource[*Widget](nil, widgets); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("ForResource(nil) = %v, want ErrNilArgument", err)
	}
	if d := client.FromREST[*Widget](nil, widgets)("ns"); d != nil {
		t.Errorf("FromREST(nil) = %v, want nil", d)
	}
	if _, err := controller.New(client.FromREST[*Widget](nil, widgets)("ns"), controller.Options[*Widget]{}); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("controller.New over FromREST(nil) = %v, want ErrNilArgument", err)
	}
}

// withManagedFields is widgetJSON with managedFields in its metadata: fields, JSON.
func withManagedFields(name, rv, fields string) string {
	return strings.Replace(widgetJSON(name, rv, "1"), `"metadata":{`, `"metadata":{"managedFields":`+fields+`,`, 1)
}

// WithoutManagedFields: the list's items and the watch's objects come without their
// managedFields, which are not even decoded (ones that would not decode into a
// ManagedFieldsEntry cost nothing), while the same client without it decodes them (and
// reports the ones that do not decode). The rest of each object is as before.
func TestForResourceWithoutManagedFieldsNeverDecodesThem(t *testing.T) {
	const fields = `[{"manager":"kubectl","operation":"Apply","apiVersion":"example.com/v1","time":"2026-11-27T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:size":{}}}}]`
	const broken = `"not a list"`
	for _, omit := range []bool{false, true} {
		t.Run(fmt.Sprintf("WithoutManagedFields=%v", omit), func(t *testing.T) {
			srv, cfg := newScriptedServer(t)
			widgets, err := client.ForResource[*Widget](cfg, widgets)
			if err != nil {
				t.Fatal(err)
			}
			d := widgets("ns")
			if omit {
				d = d.WithoutManagedFields()
			}
			srv.lists <- widgetList("10", withManagedFields("a", "5", fields), withManagedFields("broken", "6", broken))
			l, err := d.List(t.Context(), metav1.ListOptions{})
			switch {
			case omit && (err != nil || len(l.Items) != 2):
				t.Fatalf("List = %v, %v; want both widgets", l, err)
			case !omit && (!errors.Is(err, reflect.ErrIncompleteList) || len(l.Items) != 1):
				t.Fatalf("List = %v, %v; want a, and the broken widget's managedFields reported", l, err)
			}
			if a := l.Items[0]; a.Name != "a" || a.Spec.Size != 1 || a.UID != "uid-a" || (a.ManagedFields == nil) == !omit {
				t.Errorf("listed %+v, want a with managedFields %v", a, !omit)
			}

			lines := make(chan string)
			srv.watches <- lines
			w, err := d.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "10"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			lines <- watchEvent("MODIFIED", withManagedFields("a", "11", fields))
			lines <- watchEvent("MODIFIED", withManagedFields("broken", "12", broken))
			e := testwait.Recv(t, w.ResultChan(), "a's modification")
			if a, ok := e.Object.(*Widget); !ok || a.ResourceVersion != "11" || (a.ManagedFields == nil) == !omit {
				t.Errorf("watched %#v, want a at 11 with managedFields %v", e.Object, !omit)
			}
			e = testwait.Recv(t, w.ResultChan(), "the broken widget's modification")
			if _, unreadable := e.Object.(*reflect.Unreadable); unreadable == omit {
				t.Errorf("watched %#v; want it unreadable: %v", e.Object, !omit)
			}
		})
	}
}
