package manager

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/typedinformer/typedinformer/controller"
)

// Check is a health or readiness check: it returns nil when healthy, or why not. It gets
// the probe's request, as controller-runtime's healthz.Checker does. It must not block.
type Check func(req *http.Request) error

type probe int

const (
	liveness probe = iota
	readiness
)

func (p probe) String() string {
	if p == liveness {
		return "healthz"
	}
	return "readyz"
}

type namedCheck struct {
	name  string
	check Check
}

// loopNeeds are the caches a loop needs synced before this replica is ready. Guarded by
// Manager.mu.
type loopNeeds struct {
	name    string
	entries []*entry
}

// AddHealthCheck adds a check to /healthz (HealthzHandler). It returns an error wrapping
// controller.ErrNilArgument for a nil check.
func (m *Manager) AddHealthCheck(name string, check Check) error {
	return m.addCheck(liveness, name, check)
}

// AddReadyCheck adds a check to /readyz (ReadyzHandler). It returns an error wrapping
// controller.ErrNilArgument for a nil check.
func (m *Manager) AddReadyCheck(name string, check Check) error {
	return m.addCheck(readiness, name, check)
}

func (m *Manager) addCheck(p probe, name string, check Check) error {
	if m == nil || check == nil {
		return fmt.Errorf("%w: %s check %q, or its manager", controller.ErrNilArgument, p, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checks[p] = append(m.checks[p], namedCheck{name, check})
	return nil
}

// HealthzHandler returns the liveness probe: 200 while Run runs (its shutdown included)
// and every check added with AddHealthCheck passes, 503 otherwise. The body lists each
// check, "[+]name ok" or "[-]name failed: reason", as Kubernetes' own probes do.
func (m *Manager) HealthzHandler() http.Handler { return probeHandler{m, liveness} }

// ReadyzHandler returns the readiness probe: 200 once Run runs, every cache that a Loop
// needs (its own and those of Related) has synced, and every check added with
// AddReadyCheck passes; 503 before, while the server does not serve the resource of such
// a cache (the body says so, see Cache.Err), and from the start of the shutdown. A
// standby replica is ready too: its caches are warm. The body is as HealthzHandler's.
func (m *Manager) ReadyzHandler() http.Handler { return probeHandler{m, readiness} }

type probeHandler struct {
	m *Manager
	p probe
}

func (h probeHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var b strings.Builder
	failed := false
	for _, c := range h.m.probeChecks(h.p) {
		if err := run(c.check, req); err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if failed {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(&b, "%s check failed\n", h.p)
	} else {
		fmt.Fprintf(&b, "%s check passed\n", h.p)
	}
	_, _ = w.Write([]byte(b.String()))
}

// run calls check, turning a panic into a failure.
func run(check Check, req *http.Request) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panicked: %v", v)
		}
	}()
	return check(req)
}

// probeChecks returns the built-in checks of probe p, then the user's.
func (m *Manager) probeChecks(p probe) []namedCheck {
	if m == nil {
		return []namedCheck{{"manager", func(*http.Request) error { return errors.New("no manager") }}}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ended := m.state, m.ended
	checks := []namedCheck{{"manager", func(*http.Request) error {
		switch {
		case st == idle || st == starting:
			return errors.New("not started")
		case ended:
			return errors.New("stopped")
		case p == readiness && st != running:
			return errors.New("shutting down")
		}
		return nil
	}}}
	if p == readiness {
		for _, l := range m.loops {
			entries := append([]*entry(nil), l.entries...)
			checks = append(checks, namedCheck{"loop " + l.name, func(*http.Request) error {
				var waiting, why []string
				for _, e := range entries {
					if !e.synced() {
						waiting = append(waiting, e.key.String())
						if err := e.served.Err(); err != nil {
							why = append(why, err.Error())
						}
					}
				}
				switch {
				case why != nil:
					return fmt.Errorf("caches not synced: %q: %s", waiting, strings.Join(why, "; "))
				case waiting != nil:
					return fmt.Errorf("caches not synced: %q", waiting)
				}
				return nil
			}})
		}
	}
	return append(checks, m.checks[p]...)
}
