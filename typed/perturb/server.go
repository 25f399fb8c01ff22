package perturb

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// onServer prepares a run on Options.Server: a namespace of its own.
func (r *run) onServer(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(r.h.opts.Server)
	if err != nil {
		return fmt.Errorf("%w: Server: %w", ErrInvalid, err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "perturb-"}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the run's namespace: %w", err)
	}
	r.ns = ns.Name
	r.touched = map[schema.GroupVersionResource]bool{}
	return nil
}

// serverEnv returns clients of Options.Server whose requests go through a tap of
// process id (the scenario's when id < 0).
func (r *run) serverEnv(id int) Env {
	cfg := rest.CopyConfig(r.h.opts.Server)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { return &tap{r: r, id: id, next: next} })
	return Env{Clientset: kubernetes.NewForConfigOrDie(cfg), Dynamic: dynamic.NewForConfigOrDie(cfg), Clock: r.clock, Namespace: r.ns}
}

// serverSnapshot lists, in the run's namespace, every resource written in the run; the
// objects' namespace, which differs in every run, is left out.
func (r *run) serverSnapshot(ctx context.Context) (map[string]map[string]any, error) {
	dyn, err := dynamic.NewForConfig(r.h.opts.Server)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	var gvrs []schema.GroupVersionResource
	for gvr := range r.touched {
		gvrs = append(gvrs, gvr)
	}
	r.mu.Unlock()
	slices.SortFunc(gvrs, func(a, b schema.GroupVersionResource) int { return strings.Compare(a.String(), b.String()) })
	return r.h.state(gvrs, func(gvr schema.GroupVersionResource) ([]*unstructured.Unstructured, error) {
		l, err := dyn.Resource(gvr).Namespace(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := make([]*unstructured.Unstructured, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
			out[i].SetNamespace("") // each run has its own
		}
		return out, nil
	})
}

// tap is the transport of a process's (or the scenario's) clients: a crashed process's
// requests fail before they leave; successful writes are counted as the in-memory
// server's reactors count them.
type tap struct {
	r    *run
	id   int
	next http.RoundTripper
}

func (t *tap) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.id >= 0 && t.r.dead(t.id) {
		return nil, errCrashed
	}
	gvr, ns, name, sub, ok := parsePath(req.URL.Path)
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[req.Method]
	watching := ok && t.id >= 0 && req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true"
	if watching {
		t.r.watching(t.id, gvr)
		req = watchJSON(req)
	}
	resp, err := t.next.RoundTrip(req)
	if watching && err == nil && resp.StatusCode == http.StatusOK {
		resp.Body = t.r.gate(gvr, resp.Body)
		return resp, nil
	}
	if err != nil || !ok || verb == "" || resp.StatusCode >= 300 {
		return resp, err
	}
	t.r.mu.Lock()
	if ns == t.r.ns && !ignored(gvr) {
		t.r.touched[gvr] = true
	}
	t.r.countServerChange(gvr)
	t.r.mu.Unlock()
	t.r.changed(gvr)
	if t.id >= 0 {
		t.r.wrote(t.id, verb, gvr, func() string {
			res := gvr.Resource
			if gvr.Group != "" {
				res += "." + gvr.Group
			}
			if sub != "" {
				res += "/" + sub
			}
			// The namespace is the run's own: the description is the same in every run.
			return fmt.Sprintf("%s %s %s", verb, res, cmp.Or(name, "*"))
		})
	}
	return resp, nil
}

// parsePath reads a resource request's path: /api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUB]]
// or /apis/GROUP/VERSION[/namespaces/NS]/RESOURCE[/NAME[/SUB]].
func parsePath(path string) (gvr schema.GroupVersionResource, ns, name, sub string, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		gvr.Version, parts = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gvr.Group, gvr.Version, parts = parts[1], parts[2], parts[3:]
	default:
		return gvr, "", "", "", false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	gvr.Resource = parts[0]
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		sub = parts[2]
	}
	return gvr, ns, name, sub, true
}
