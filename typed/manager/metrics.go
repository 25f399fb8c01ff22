package manager

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/internal/guard"
)

// ErrMetricsOptions is returned, wrapped, by Run for metrics options that do not go
// together: a metrics address or listener without a MetricsHandler (which would serve
// nothing in silence), or MetricsHandler, MetricsAuth or Pprof without a metrics address
// or listener. Run returns it before it starts anything.
var ErrMetricsOptions = errors.New("invalid metrics options")

// MetricsAuthCacheTTL is how long Options.MetricsAuth keeps an allowed decision for a
// token and path; a refused one is kept a tenth of it, so that a scraper granted access
// is let in soon.
const MetricsAuthCacheTTL = time.Minute

// metricsShutdownTimeout bounds how long scrapes in flight may finish once Run has
// stopped everything else.
const metricsShutdownTimeout = 5 * time.Second

// maxAuthDecisions bounds the decisions MetricsAuth keeps: scrapers are few, and a flood
// of made-up tokens must not grow the Manager's memory.
const maxAuthDecisions = 1024

// serveAll starts the probe and metrics servers the options ask for, or neither when one
// of them cannot start.
func (m *Manager) serveAll(ctx context.Context) (probes, metrics *server, err error) {
	// Run closes the listeners it was given when it returns, also when it could not start.
	closeGiven := func() {
		for _, l := range []net.Listener{m.opts.HealthProbeListener, m.opts.MetricsListener} {
			if !guard.IsNil(l) {
				_ = l.Close()
			}
		}
	}
	handler, err := m.metricsHandler()
	if err != nil {
		closeGiven()
		return nil, nil, err
	}
	l, err := listen(m.opts.MetricsListener, m.opts.MetricsAddress)
	if err != nil {
		closeGiven()
		return nil, nil, fmt.Errorf("serving metrics: %w", err)
	}
	if probes, err = m.serveProbes(ctx); err != nil {
		if l != nil {
			_ = l.Close()
		}
		return nil, nil, err
	}
	if l != nil {
		metrics = m.serve(ctx, "metrics", l, handler)
	}
	return probes, metrics, nil
}

// metricsHandler checks the metrics options and returns the metrics server's handler,
// nil when there is no metrics server.
func (m *Manager) metricsHandler() (http.Handler, error) {
	o := m.opts
	serving := !guard.IsNil(o.MetricsListener) || o.MetricsAddress != ""
	h := o.MetricsHandler
	if guard.IsNil(h) {
		h = nil
	}
	auth := o.MetricsAuth
	if guard.IsNil(auth) {
		auth = nil
	}
	switch {
	case serving && h == nil:
		return nil, fmt.Errorf("%w: a metrics address or listener without a MetricsHandler", ErrMetricsOptions)
	case !serving && h != nil:
		return nil, fmt.Errorf("%w: a MetricsHandler without a metrics address or listener", ErrMetricsOptions)
	case !serving && auth != nil:
		return nil, fmt.Errorf("%w: MetricsAuth without a metrics address or listener", ErrMetricsOptions)
	case !serving && o.Pprof:
		return nil, fmt.Errorf("%w: Pprof without a metrics address or listener", ErrMetricsOptions)
	case !serving:
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if auth == nil {
		return mux, nil
	}
	return &scrapeAuth{client: auth, next: mux, decisions: map[decisionKey]decision{}}, nil
}

// scrapeAuth lets a request through only when the API server authenticates its bearer
// token (TokenReview) and authorizes its user for the request's verb on its path as a
// non-resource URL (SubjectAccessReview).
type scrapeAuth struct {
	client kubernetes.Interface
	next   http.Handler

	mu        sync.Mutex
	decisions map[decisionKey]decision
}

type decisionKey struct {
	token      [sha256.Size]byte // the token's hash: the map holds no credential
	verb, path string
}

type decision struct {
	status  int // http.StatusOK, StatusUnauthorized or StatusForbidden
	user    string
	expires time.Time
}

func (a *scrapeAuth) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	token, ok := bearerToken(req)
	if !ok {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	key := decisionKey{token: sha256.Sum256([]byte(token)), verb: strings.ToLower(req.Method), path: req.URL.Path}
	d, ok := a.cached(key)
	if !ok {
		var err error
		if d, err = a.decide(req.Context(), token, key); err != nil {
			klog.FromContext(req.Context()).Error(err, "authorizing a request to the metrics server failed", "path", key.path)
			http.Error(w, "Authorization failed", http.StatusInternalServerError)
			return
		}
		a.keep(key, d)
	}
	switch d.status {
	case http.StatusOK:
		a.next.ServeHTTP(w, req)
	case http.StatusUnauthorized:
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	default:
		http.Error(w, fmt.Sprintf("Authorization denied for user %s", d.user), http.StatusForbidden)
	}
}

// bearerToken returns the token of req's "Authorization: Bearer" header.
func bearerToken(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// decide asks the API server: a TokenReview of token, then a SubjectAccessReview of its
// user for key's verb and path.
func (a *scrapeAuth) decide(ctx context.Context, token string, key decisionKey) (decision, error) {
	now := time.Now()
	review, err := a.client.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("token review: %w", err)
	}
	if review == nil || !review.Status.Authenticated {
		return decision{status: http.StatusUnauthorized, expires: now.Add(MetricsAuthCacheTTL / 10)}, nil
	}
	user := review.Status.User
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: key.path, Verb: key.verb},
		}}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("subject access review of user %s: %w", user.Username, err)
	}
	if sar == nil || !sar.Status.Allowed || sar.Status.Denied {
		return decision{status: http.StatusForbidden, user: user.Username, expires: now.Add(MetricsAuthCacheTTL / 10)}, nil
	}
	return decision{status: http.StatusOK, user: user.Username, expires: now.Add(MetricsAuthCacheTTL)}, nil
}

func (a *scrapeAuth) cached(key decisionKey) (decision, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.decisions[key]
	if ok && time.Now().After(d.expires) {
		delete(a.decisions, key)
		return decision{}, false
	}
	return d, ok
}

func (a *scrapeAuth) keep(key decisionKey, d decision) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.decisions) >= maxAuthDecisions {
		clear(a.decisions)
	}
	a.decisions[key] = d
}
