package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

// logLines captures what a funcr JSON logger writes, one decoded map per line.
type logLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *logLines) logger() klog.Logger {
	return funcr.NewJSON(func(obj string) {
		var m map[string]any
		if err := json.Unmarshal([]byte(obj), &m); err != nil {
			m = map[string]any{"unparsed": obj}
		}
		l.mu.Lock()
		l.lines = append(l.lines, m)
		l.mu.Unlock()
	}, funcr.Options{Verbosity: 10})
}

// find returns the first line whose "err" or "error" value contains text.
func (l *logLines) find(text string) (map[string]any, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.lines {
		for _, key := range []string{"err", "error"} {
			if s, ok := m[key].(string); ok && strings.Contains(s, text) {
				return m, true
			}
		}
	}
	return nil, false
}

func (l *logLines) all() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]map[string]any(nil), l.lines...)
}

// level describes how a line was logged: "error", or "info V(n)".
func level(m map[string]any) string {
	if _, ok := m["error"]; ok {
		return "error"
	}
	return fmt.Sprintf("info V(%v)", m["level"])
}

// TestEverythingIsObservableAtTheRightLevel keeps DESIGN 12 without drowning it: with no
// error handler, routine list/watch protocol events (410 Gone, a too large resource
// version, a short watch, a server refusing or closing a watch's connection or shedding
// load while it restarts) are logged at verbosity 2, as client-go's reflector logs them, and
// real failures (forbidden, a server error, an unexpected object, a server unreachable
// for a list, a handler panic) as errors, a panic with its stack.
func TestEverythingIsObservableAtTheRightLevel(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://apiserver/api/v1/configmaps", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED),
	}}
	tooLarge := apierrors.NewTimeoutError("Too large resource version: 9, current: 1", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	tests := []struct {
		name string
		// before runs before the controller starts, after once it has synced and watches.
		before, after func(src *fake.ListerWatcher[obj, list])
		// text is part of the logged error, to find its line.
		text      string
		wantLevel string
	}{
		{name: "410 Gone", before: failList(apierrors.NewResourceExpired("too old resource version: 1 (5)")), text: "too old resource version", wantLevel: "info V(2)"},
		{name: "too large resource version", before: failList(tooLarge), text: "Too large resource version", wantLevel: "info V(2)"},
		{name: "connection refused while watching", before: failWatch(refused), text: "connection refused", wantLevel: "info V(2)"},
		{name: "EOF while watching", before: failWatch(&url.Error{Op: "Get", URL: "https://apiserver", Err: io.EOF}), text: "EOF", wantLevel: "info V(2)"},
		// A server unreachable for a list is as often a wrong address as a restart.
		{name: "connection refused for a list", before: failList(refused), text: "connection refused", wantLevel: "error"},
		{name: "server shutting down", before: failList(apierrors.NewTooManyRequests("The apiserver is shutting down, please try again later.", 1)), text: "shutting down", wantLevel: "info V(2)"},
		{
			name: "short watch", text: "very short watch", wantLevel: "info V(2)",
			after: func(src *fake.ListerWatcher[obj, list]) { src.CloseWatches() },
		},
		{name: "forbidden", before: failList(apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("RBAC says no"))), text: "RBAC says no", wantLevel: "error"},
		{name: "server error", before: failList(apierrors.NewInternalError(errors.New("etcd is sad"))), text: "etcd is sad", wantLevel: "error"},
		{
			name: "unexpected object", text: "unexpected object", wantLevel: "error",
			after: func(src *fake.ListerWatcher[obj, list]) {
				src.Send(watch.Event{Type: watch.Added, Object: &corev1.Secret{}})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[obj, list](cm("ns", "a", nil))
			if tt.before != nil {
				tt.before(src)
			}
			logs := &logLines{}
			c := testctl.New(t, src, controller.Options[obj]{Options: reflect.Options[obj]{Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 20}}})
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.logger()))
			done := make(chan struct{})
			go func() { defer close(done); _ = c.Run(ctx) }()
			defer func() { cancel(); <-done }()
			if err := c.WaitForSync(ctx); err != nil {
				t.Fatal(err)
			}
			if err := src.WaitForWatchers(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if tt.after != nil {
				tt.after(src)
			}
			var line map[string]any
			if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				var ok bool
				line, ok = logs.find(tt.text)
				return ok, nil
			}); err != nil {
				t.Fatalf("nothing logged about %q; lines: %v", tt.text, logs.all())
			}
			if diff := cmp.Diff(tt.wantLevel, level(line)); diff != "" {
				t.Errorf("logged %v at the wrong level (-want +got):\n%s", line, diff)
			}
		})
	}
}

func failList(err error) func(src *fake.ListerWatcher[obj, list]) {
	return func(src *fake.ListerWatcher[obj, list]) { src.FailList(1, err) }
}

func failWatch(err error) func(src *fake.ListerWatcher[obj, list]) {
	return func(src *fake.ListerWatcher[obj, list]) { src.FailWatch(1, err) }
}

// TestHandlerPanicIsLoggedWithItsStack keeps DESIGN 12 for panics: with no error
// handler, a recovered handler panic is logged as an error whose "stack" names the
// panicking function, so that the log alone says where it happened.
func TestHandlerPanicIsLoggedWithItsStack(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil))
	logs := &logLines{}
	c := testctl.New(t, src, controller.Options[obj]{})
	if _, err := c.AddHandler("panicky", controller.HandlerFunc[obj](panickyHandler)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.logger()))
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var line map[string]any
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		line, ok = logs.find("handler \"panicky\" panicked")
		return ok, nil
	}); err != nil {
		t.Fatalf("the panic was not logged; lines: %v", logs.all())
	}
	if got := level(line); got != "error" {
		t.Errorf("the panic was logged as %s, want an error", got)
	}
	if stack, _ := line["stack"].(string); !strings.Contains(stack, "panickyHandler") {
		t.Errorf("logged stack %q does not name the panicking handler", stack)
	}
}

func panickyHandler(context.Context, event.Event[obj]) { panic("boom") }

// TestPanickingErrorHandlerIsLoggedNotFatal keeps DESIGN 18 for the error handler: a
// handler that panics on the reflector's goroutine (an unexpected object) and on a
// handler's (a handler panic) is recovered and logged as an error with its stack, and
// the controller goes on.
func TestPanickingErrorHandlerIsLoggedNotFatal(t *testing.T) {
	src := fake.New[obj, list](cm("ns", "a", nil))
	logs := &logLines{}
	c := testctl.New(t, src, controller.Options[obj]{Options: reflect.Options[obj]{OnError: func(context.Context, error) { panic("error handler boom") }}})
	if _, err := c.AddHandler("panicky", controller.HandlerFunc[obj](panickyHandler)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.logger()))
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := src.WaitForWatchers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	src.Send(watch.Event{Type: watch.Added})
	if _, err := src.Create(cm("ns", "b", nil)); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, ok := c.Store().Get("ns/b")
		return ok, nil
	}); err != nil {
		t.Fatal("the controller stopped after its error handler panicked")
	}
	// Both panics are logged, the one on the handler's goroutine whenever it comes.
	for _, handling := range []string{"unexpected object", "panicked on"} {
		logged := func(context.Context) (bool, error) {
			for _, m := range logs.all() {
				h, _ := m["handling"].(string)
				stack, _ := m["stack"].(string)
				if m["msg"] == "error handler panicked" && strings.Contains(h, handling) && strings.Contains(stack, "TestPanickingErrorHandlerIsLoggedNotFatal") {
					return true, nil
				}
			}
			return false, nil
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, logged); err != nil {
			t.Errorf("no error logged for the error handler's panic on %q, with its stack; lines: %v", handling, logs.all())
		}
	}
}
