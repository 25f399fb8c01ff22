package manager_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/typed/manager"
)

// listenLocal returns a listener on a free local port.
func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// scrape GETs path from l's server with token (none when empty) and returns the status
// code and body.
func scrape(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var metricsBody = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "controller_runtime_reconcile_total 1\n")
})

// Run serves the handler at /metrics on the listener while it runs, pprof only when
// asked, and stops serving when it returns.
func TestMetricsServedWhileRunning(t *testing.T) {
	for _, pprof := range []bool{false, true} {
		l := listenLocal(t)
		addr := l.Addr().String()
		m := manager.New(manager.Options{MetricsListener: l, MetricsHandler: metricsBody, Pprof: pprof})
		r := run(t, m)
		if code, body := scrape(t, addr, "/metrics", ""); code != 200 || !strings.Contains(body, "controller_runtime_reconcile_total") {
			t.Errorf("GET /metrics = %d %q, want 200 and the handler's body", code, body)
		}
		want := http.StatusNotFound
		if pprof {
			want = http.StatusOK
		}
		if code, _ := scrape(t, addr, "/debug/pprof/", ""); code != want {
			t.Errorf("Pprof %v: GET /debug/pprof/ = %d, want %d", pprof, code, want)
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			t.Errorf("the metrics server still listens after Run returned")
		}
	}
}

// Metrics options that cannot work are Run's error before anything runs: an address
// without a handler (a typed-nil handler counts as none) would otherwise serve nothing
// in silence, and a handler, auth or pprof without an address would be ignored.
func TestMetricsOptionsThatCannotWorkAreRunsError(t *testing.T) {
	var typedNilHandler http.HandlerFunc
	var typedNilClient *k8sfake.Clientset
	for name, opts := range map[string]manager.Options{
		"address, no handler":        {MetricsAddress: "127.0.0.1:0"},
		"address, typed-nil handler": {MetricsAddress: "127.0.0.1:0", MetricsHandler: typedNilHandler},
		"handler, no address":        {MetricsHandler: metricsBody},
		"auth, no address":           {MetricsAuth: k8sfake.NewClientset()},
		"pprof, no address":          {Pprof: true},
	} {
		t.Run(name, func(t *testing.T) {
			m := manager.New(opts)
			ran := false
			if err := m.Add("never", manager.RunnableFunc(func(context.Context) error { ran = true; return nil })); err != nil {
				t.Fatal(err)
			}
			if err := m.Run(testContext(t)); !errors.Is(err, manager.ErrMetricsOptions) || ran {
				t.Errorf("Run = %v (ran a runnable: %v), want ErrMetricsOptions before running anything", err, ran)
			}
			goleak.VerifyNone(t)
		})
	}
	// A typed-nil auth client is none: the server serves without auth.
	l := listenLocal(t)
	m := manager.New(manager.Options{MetricsListener: l, MetricsHandler: metricsBody, MetricsAuth: typedNilClient})
	r := run(t, m)
	if code, _ := scrape(t, l.Addr().String(), "/metrics", ""); code != 200 {
		t.Errorf("a typed-nil MetricsAuth: GET /metrics = %d, want 200 (no auth)", code)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// An address in use is Run's error, returned at once, not a hang, and neither the probe
// server nor anything else is left running.
func TestRunFailsWhenTheMetricsAddressIsInUse(t *testing.T) {
	taken := listenLocal(t)
	defer taken.Close()
	probes := listenLocal(t)
	m := manager.New(manager.Options{MetricsAddress: taken.Addr().String(), MetricsHandler: metricsBody, HealthProbeListener: probes})
	done := make(chan error, 1)
	go func() { done <- m.Run(testContext(t)) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "serving metrics") {
			t.Errorf("Run = %v, want an error serving metrics", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run hangs on a metrics address in use")
	}
	if _, err := probes.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the probe listener Run was given is not closed: Accept = %v", err)
	}
	goleak.VerifyNone(t)
}

// A scrape while the Manager shuts down is answered: the metrics server stops last,
// after the runnables and caches, letting a scrape in flight finish.
func TestScrapeDuringShutdown(t *testing.T) {
	l := listenLocal(t)
	addr := l.Addr().String()
	inHandler := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { close(inHandler) })
		<-release
		_, _ = io.WriteString(w, "late 1\n")
	})
	m := manager.New(manager.Options{MetricsListener: l, MetricsHandler: slow})
	stopping := make(chan struct{})
	if err := m.Add("slow to stop", manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		close(stopping)
		time.Sleep(100 * time.Millisecond)
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	r := start(t, m)
	got := make(chan int, 1)
	go func() {
		code, _ := scrape(t, addr, "/metrics", "")
		got <- code
	}()
	receive(t, inHandler, "the scrape reaches the handler")
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop(t) }()
	receive(t, stopping, "the shutdown starts")
	close(release)
	if code := receive(t, got, "the scrape in flight is answered"); code != 200 {
		t.Errorf("scrape during shutdown = %d, want 200", code)
	}
	if err := receive(t, stopped, "Run returns"); err != nil {
		t.Errorf("Run = %v", err)
	}
}

// authClient is a fake clientset whose TokenReviews know the tokens of users, and whose
// SubjectAccessReviews allow the users of allowed on GET /metrics; it counts reviews.
func authClient(users map[string]string, allowed ...string) (kubernetes.Interface, *atomic.Int32) {
	cs := k8sfake.NewClientset()
	var reviews atomic.Int32
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if tr.Spec.Token == "broken" {
			return true, nil, errors.New("the API server is down")
		}
		if user, ok := users[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user, Groups: []string{"scrapers"}}}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		na := sar.Spec.NonResourceAttributes
		for _, u := range allowed {
			if sar.Spec.User == u && na != nil && na.Verb == "get" && na.Path == "/metrics" && sar.Spec.ResourceAttributes == nil {
				sar.Status.Allowed = true
			}
		}
		return true, sar, nil
	})
	return cs, &reviews
}

// With MetricsAuth, a scrape without a token, or with one the API server does not know,
// is refused with 401; a user not allowed GET on /metrics with 403; an allowed one gets
// the metrics. A failing review is a 500, never a scrape let through. Decisions are
// cached: a second scrape with the same token makes no review.
func TestMetricsAuth(t *testing.T) {
	cs, reviews := authClient(map[string]string{"good": "prometheus", "bad": "intruder", "broken": "x"}, "prometheus")
	l := listenLocal(t)
	addr := l.Addr().String()
	m := manager.New(manager.Options{MetricsListener: l, MetricsHandler: metricsBody, MetricsAuth: cs, Pprof: true})
	r := run(t, m)
	for _, c := range []struct {
		token, path string
		want        int
	}{
		{"", "/metrics", http.StatusUnauthorized},
		{"unknown", "/metrics", http.StatusUnauthorized},
		{"bad", "/metrics", http.StatusForbidden},
		{"broken", "/metrics", http.StatusInternalServerError},
		{"good", "/metrics", http.StatusOK},
		{"good", "/debug/pprof/", http.StatusForbidden}, // allowed /metrics only
	} {
		if code, _ := scrape(t, addr, c.path, c.token); code != c.want {
			t.Errorf("GET %s with token %q = %d, want %d", c.path, c.token, code, c.want)
		}
	}
	before := reviews.Load()
	if code, _ := scrape(t, addr, "/metrics", "good"); code != 200 {
		t.Errorf("second scrape = %d, want 200", code)
	}
	if n := reviews.Load() - before; n != 0 {
		t.Errorf("a second scrape with the same token made %d reviews, want 0 (cached)", n)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
