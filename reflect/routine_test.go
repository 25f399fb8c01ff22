package reflect_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/reflect"
)

// TestIsRoutineTellsProtocolEventsFromFailures keeps DESIGN 12 legible: the errors the
// reflector retries as part of the protocol are routine, wrapped as the reflector wraps
// them; failures that need a person are not.
func TestIsRoutineTellsProtocolEventsFromFailures(t *testing.T) {
	tooLarge := apierrors.NewTimeoutError("Too large resource version: 9, current: 1", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}
	dial := func(errno syscall.Errno) error {
		return &url.Error{Op: "Get", URL: "https://apiserver", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}}
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "410 Gone", err: apierrors.NewGone("gone"), want: true},
		{name: "expired", err: apierrors.NewResourceExpired("too old"), want: true},
		{name: "too large resource version", err: tooLarge, want: true},
		{name: "410 in a watch ERROR event", err: fmt.Errorf("%w: %w", reflect.ErrWatchEvent, apierrors.NewResourceExpired("too old")), want: true},
		{name: "short watch", err: fmt.Errorf("%w after 1ms", reflect.ErrShortWatch), want: true},
		{name: "connection refused", err: dial(syscall.ECONNREFUSED), want: true},
		{name: "connection reset", err: dial(syscall.ECONNRESET), want: true},
		{name: "EOF", err: &url.Error{Op: "Get", URL: "https://apiserver", Err: io.EOF}, want: true},
		{name: "unexpected EOF", err: io.ErrUnexpectedEOF, want: true},
		{name: "HTTP/2 GOAWAY", err: errors.New("http2: server sent GOAWAY and closed the connection"), want: true},
		{name: "server shutting down", err: apierrors.NewTooManyRequests("The apiserver is shutting down", 1), want: true},
		{name: "forbidden", err: apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no")), want: false},
		{name: "server error", err: apierrors.NewInternalError(errors.New("etcd")), want: false},
		{name: "watch ERROR event with a server error", err: fmt.Errorf("%w: %w", reflect.ErrWatchEvent, apierrors.NewInternalError(errors.New("etcd"))), want: false},
		{name: "unexpected object", err: fmt.Errorf("%w: got *v1.Secret", reflect.ErrUnexpectedObject), want: false},
		{name: "incomplete list", err: fmt.Errorf("%w: 1 of 2", reflect.ErrIncompleteList), want: false},
		{name: "nil result", err: reflect.ErrNilResult, want: false},
		{name: "no name", err: event.ErrNoName, want: false},
		{name: "connection timeout", err: dial(syscall.ETIMEDOUT), want: false},
		{name: "nil", err: nil, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, err := range []error{tt.err, fmt.Errorf("cm: list: %w", tt.err)} {
				if tt.err == nil {
					err = nil
				}
				if got := reflect.IsRoutine(err); got != tt.want {
					t.Errorf("IsRoutine(%v) = %v, want %v", err, got, tt.want)
				}
			}
		})
	}
}

// TestAServerUnreachableForAListIsAFailure: what IsRoutine calls routine while a watch
// resumes (connection refused, EOF) is a failure when the reflector's list or watch-list
// meets it, since a server that cannot be reached for a list is as often a wrong address
// as a restart. It is checked on the errors the reflector itself reports.
func TestAServerUnreachableForAListIsAFailure(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://apiserver", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	failList := func(src *lw, err error) { src.FailList(1, err) }
	failWatch := func(src *lw, err error) { src.FailWatch(1, err) }
	tests := []struct {
		name      string
		watchList bool
		fail      func(src *lw, err error)
		err       error
		want      bool
	}{
		{name: "connection refused for a list", fail: failList, err: refused, want: false},
		{name: "unexpected EOF for a list", fail: failList, err: io.ErrUnexpectedEOF, want: false},
		{name: "connection refused for a watch-list", watchList: true, fail: failWatch, err: refused, want: false},
		{name: "connection refused for a watch", fail: failWatch, err: refused, want: true},
		{name: "410 Gone for a list", fail: failList, err: apierrors.NewGone("gone"), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := firstReportedError(t, tt.watchList, tt.fail, tt.err)
			if got := reflect.IsRoutine(err); got != tt.want {
				t.Errorf("IsRoutine(%v) = %v, want %v", err, got, tt.want)
			}
		})
	}
}

// firstReportedError starts a reflector (with watch-list or not) on a source that fails
// once as fail says, and returns the first error the reflector reports.
func firstReportedError(t *testing.T, watchList bool, fail func(src *lw, err error), err error) error {
	t.Helper()
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
	fail(src, err)
	cache := start(t, src, reflect.Options[obj]{WatchList: watchList, Backoff: fastRetries})
	cache.waitFor(t, "the reported error", func(_ []call, errs []error) bool { return len(errs) > 0 })
	_, errs := cache.snapshot()
	return errs[0]
}

// TestIsResourceNotServedOnlyForAListAnswered404: a 404 on the reflector's list or
// watch-list means the resource is not served (a deleted CustomResourceDefinition); a 404
// anywhere else, or another failure of a list, does not.
func TestIsResourceNotServedOnlyForAListAnswered404(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "")
	failList := func(src *lw, err error) { src.FailList(1, err) }
	failWatch := func(src *lw, err error) { src.FailWatch(1, err) }
	tests := []struct {
		name      string
		watchList bool
		fail      func(src *lw, err error)
		err       error
		want      bool
	}{
		{name: "404 for a list", fail: failList, err: notFound, want: true},
		{name: "404 for a watch-list", watchList: true, fail: failWatch, err: notFound, want: true},
		{name: "404 for a watch", fail: failWatch, err: notFound, want: false},
		{name: "403 for a list", fail: failList, err: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no")), want: false},
		{name: "500 for a list", fail: failList, err: apierrors.NewInternalError(errors.New("etcd")), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := firstReportedError(t, tt.watchList, tt.fail, tt.err)
			if got := reflect.IsResourceNotServed(err); got != tt.want {
				t.Errorf("IsResourceNotServed(%v) = %v, want %v", err, got, tt.want)
			}
		})
	}
	if reflect.IsResourceNotServed(notFound) {
		t.Error("IsResourceNotServed is true for a 404 the reflector did not report as a list's")
	}
}

// TestAWatchAnswered404Relists: a resource that stops being served (a deleted CRD)
// answers the re-watch with 404 for as long as it is gone; the reflector relists instead
// of watching again, so that the list says IsResourceNotServed and, once the resource is
// back, finds its objects.
func TestAWatchAnswered404Relists(t *testing.T) {
	src := fake.New[obj, *corev1.ConfigMapList](cm("a"))
	cache := start(t, src, reflect.Options[obj]{Backoff: fastRetries})
	cache.waitFor(t, "the first list", func(calls []call, _ []error) bool { return len(calls) > 0 })
	src.FailWatch(1, apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "widgets"}, ""))
	src.CloseWatches()
	cache.waitFor(t, "a relist after the watch's 404", func([]call, []error) bool { return src.ListCalls() >= 2 })
}
