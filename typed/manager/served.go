package manager

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
)

// DefaultResourceBackoff is Options.ResourceBackoff's default: a cache whose resource is
// not served checks whether it is served again after 1s, then 2s, 4s and so on, up to
// every 2 minutes.
var DefaultResourceBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 2 * time.Minute}

// CRDClient is what the Manager needs of CustomResourceDefinitions: to list and watch
// them. apiextensionsclientset.NewForConfig(cfg).ApiextensionsV1().CustomResourceDefinitions()
// is one.
type CRDClient = controller.ListerWatcher[*apiextensionsv1.CustomResourceDefinition, *apiextensionsv1.CustomResourceDefinitionList]

// probeTimeout bounds one check that a resource is served again.
const probeTimeout = 30 * time.Second

// served follows whether the server serves one shared cache's resource, and holds the
// cache's requests while it does not. It is not generic: the gate, the waiter and the
// readiness check share it.
//
// A cache is serving, out (not served: requests wait; a waiter watches for the resource
// to come back), or resuming (served again: requests go through, and the next watch makes
// the reflector relist; once the relist is in, serving again).
type served struct {
	cache    string // the cache's name, for errors and logs
	resource string // the resource's name, for logs
	// await waits until the resource is served again, returning false when ctx ends
	// first.
	await func(ctx context.Context) bool

	mu      sync.Mutex
	ctx     context.Context // the controller's Run context; nil before Run
	err     error           // why the resource is not served; nil when serving
	open    chan struct{}   // closed while requests may go to the server
	ready   chan struct{}   // closed while serving
	waiting bool            // a waiter runs
	relist  bool            // the reflector must relist before it watches again
	listed  bool            // a list succeeded while resuming
	waiters sync.WaitGroup
	// notifyApplied is the controller's NotifyApplied, set before it runs: a watch-list
	// that resumes the cache replaces it as its events come, after the gate's last call.
	notifyApplied func(rv uint64, fn func()) (stop func() bool, reached bool)
}

func newServed(cache, resource string, await func(ctx context.Context) bool) *served {
	open, ready := make(chan struct{}), make(chan struct{})
	close(open)
	close(ready)
	return &served{cache: cache, resource: resource, await: await, open: open, ready: ready}
}

// run runs the controller's run with ctx, then waits for the waiter, if one runs.
func (s *served) run(ctx context.Context, run func(context.Context) error) error {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	err := run(ctx)
	s.waiters.Wait() // the waiter ends with ctx, as the controller did
	return err
}

// Err returns why the resource is not served, nil when it is.
func (s *served) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// serving reports whether the cache reflects the server, as far as serving goes.
func (s *served) serving() bool {
	select {
	case <-s.readyChan():
		return true
	default:
		return false
	}
}

// readyChan returns a channel closed once the cache serves (at once if it does).
func (s *served) readyChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// wait blocks while requests must not go to the server, returning ctx's error if ctx
// ends first.
func (s *served) wait(ctx context.Context) error {
	s.mu.Lock()
	open := s.open
	s.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notServed records that the server answered a request with notFound: it closes the
// gate and starts the waiter, logs the outage at error level once (a resource still not
// served after it seemed back is logged at verbosity 2), and returns the error to give
// the reflector.
func (s *served) notServed(notFound error) error {
	err := fmt.Errorf("cache %s: %w: %s: %w", s.cache, ErrResourceNotServed, s.resource, notFound)
	s.mu.Lock()
	ctx := s.ctx
	if ctx == nil || ctx.Err() != nil || s.waiting {
		s.mu.Unlock()
		return err
	}
	outage := s.err == nil
	s.err = err
	s.open = make(chan struct{})
	if outage {
		s.ready = make(chan struct{})
	}
	s.waiting, s.relist, s.listed = true, false, false
	s.waiters.Add(1)
	s.mu.Unlock()

	logger := klog.FromContext(ctx)
	if outage {
		logger.Error(err, "The server does not serve the resource: the cache stops until it is served again",
			"cache", s.cache, "resource", s.resource)
	} else {
		logger.V(2).Info("The resource is still not served", "cache", s.cache, "resource", s.resource, "err", notFound)
	}
	go func() {
		defer s.waiters.Done()
		if !s.await(ctx) {
			return
		}
		s.mu.Lock()
		s.waiting, s.relist = false, true
		close(s.open)
		s.mu.Unlock()
		logger.Info("The resource is served again: the cache relists", "cache", s.cache, "resource", s.resource)
	}()
	return err
}

// listing is called before a list (or a watch-list) goes to the server: it relists.
func (s *served) listing() {
	s.mu.Lock()
	s.relist = false
	s.mu.Unlock()
}

// listedOK is called after a list succeeded.
func (s *served) listedOK() {
	s.mu.Lock()
	if s.err != nil && !s.waiting {
		s.listed = true
	}
	s.mu.Unlock()
}

// watching is called before a watch goes to the server: it returns an error that makes
// the reflector relist, when it must relist first. Only a list clears that: a probe for
// progress watches through the gate too, and may come before the cache's own watch.
func (s *served) watching() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.relist {
		return nil
	}
	return apierrors.NewResourceExpired(fmt.Sprintf("%s is served again after an outage: relisting", s.resource))
}

// resuming reports whether the resource is served again and the cache has not relisted.
func (s *served) resuming() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil && !s.waiting
}

// streamed is called after the watch-list of a resumption opened, with rv, the resource
// version of a consistent read made just before it: the watch-list's initial state is
// at least as new, so the cache serves again once it has applied rv, which the
// watch-list's replace of the cache does (and a list would have done before the watch).
func (s *served) streamed(rv string) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err == nil && s.notifyApplied != nil {
		if _, reached := s.notifyApplied(n, s.relisted); !reached {
			return
		}
	}
	s.relisted() // versions that do not compare: as soon as the relist is under way
}

// relisted makes a resuming cache serve again, unless another outage began meanwhile.
func (s *served) relisted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil || s.waiting {
		return
	}
	s.listed, s.err = false, nil
	close(s.ready)
}

// watchedOK is called after a watch opened: after the relist of a resumption, the cache
// serves again.
func (s *served) watchedOK() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.listed {
		return
	}
	s.listed, s.err = false, nil
	close(s.ready)
}

// gate is the ListerWatcher of a shared cache: lw's requests, held while s says the
// resource is not served, with a 404 Not Found turned into an outage.
type gate[T event.Object, L reflect.List] struct {
	lw controller.ListerWatcher[T, L]
	s  *served
}

// IsWatchListSemanticsUnSupported answers for the ListerWatcher the gate wraps (see
// reflect.WatchListUnsupported): the reflector sees that one only through the gate.
func (g gate[T, L]) IsWatchListSemanticsUnSupported() bool {
	return reflect.WatchListUnsupported(g.lw)
}

func (g gate[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	var zero L
	if err := g.s.wait(ctx); err != nil {
		return zero, err
	}
	g.s.listing()
	l, err := g.lw.List(ctx, opts)
	switch {
	case apierrors.IsNotFound(err):
		return l, g.s.notServed(err)
	case err == nil:
		g.s.listedOK()
	}
	return l, err
}

func (g gate[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if err := g.s.wait(ctx); err != nil {
		return nil, err
	}
	watchList := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	from := "" // for the watch-list of a resumption, a resource version read before it
	if watchList {
		g.s.listing()
		if g.s.resuming() {
			var err error
			if from, err = g.consistentRV(ctx, opts); err != nil {
				return nil, err
			}
		}
	} else if err := g.s.watching(); err != nil {
		return nil, err
	}
	w, err := g.lw.Watch(ctx, opts)
	switch {
	case apierrors.IsNotFound(err):
		return w, g.s.notServed(err)
	case err == nil && from != "":
		g.s.streamed(from)
	case err == nil && watchList:
		g.s.listedOK()
	case err == nil:
		g.s.watchedOK()
	}
	return w, err
}

// consistentRV returns the resource version of a consistent read of one object with
// opts' selectors.
func (g gate[T, L]) consistentRV(ctx context.Context, opts metav1.ListOptions) (string, error) {
	l, err := g.lw.List(ctx, metav1.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector, Limit: 1})
	switch {
	case apierrors.IsNotFound(err):
		return "", g.s.notServed(err)
	case err != nil && !errors.Is(err, reflect.ErrIncompleteList):
		return "", err
	case guard.IsNil(l):
		return "", fmt.Errorf("%w: List returned %#v", reflect.ErrNilResult, l)
	}
	return l.GetResourceVersion(), nil
}

// reportCacheError is a shared controller's error handler: it logs as the controller
// would (controller.Options.OnError), except that a resource not served has been logged
// once for its outage, by served.notServed.
func reportCacheError(name string) func(context.Context, error) {
	return func(ctx context.Context, err error) {
		logger := klog.FromContext(ctx)
		var panicked *controller.PanicError
		var mutation *eventcache.MutationError
		switch {
		case errors.As(err, &mutation):
			logger.Error(err, "cached object changed in place", "controller", name, "key", mutation.Key)
		case errors.Is(err, ErrResourceNotServed) || reflect.IsResourceNotServed(err):
			logger.V(4).Info("Resource not served", "controller", name, "err", err)
		case errors.As(err, &panicked):
			logger.Error(err, "handler panicked", "controller", name, "stack", string(panicked.Stack))
		case reflect.IsRoutine(err):
			logger.V(2).Info("list/watch protocol event, retrying", "controller", name, "err", err)
		default:
			logger.Error(err, "controller error", "controller", name)
		}
	}
}

// awaitServed returns the function that waits until a cache's resource is served again:
// it checks with one list of the resource through lw, after each step of
// Options.ResourceBackoff and, when the Manager has a CRDClient and the resource's group
// and resource are known, each time the resource's CustomResourceDefinition is seen
// established and serving its version (then checking again soon, backing off from
// 100ms, as the resource's handler lags slightly behind the CRD's condition).
func awaitServed[T event.Object, L reflect.List](m *Manager, cache string, gvr schema.GroupVersionResource, lw controller.ListerWatcher[T, L]) func(context.Context) bool {
	slow := m.opts.ResourceBackoff
	if slow.Duration <= 0 {
		slow = DefaultResourceBackoff
	}
	crds := m.opts.CustomResourceDefinitions
	return func(ctx context.Context) bool {
		backoff := slow
		fast := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: max(slow.Cap, slow.Duration)}
		var crd *crdWatch
		if !guard.IsNil(crds) && gvr.Group != "" && gvr.Resource != "" {
			crd = watchCRD(ctx, crds, cache, gvr)
			defer crd.stop()
		}
		var changed <-chan struct{}
		if crd != nil {
			changed = crd.changed
		}
		for {
			var d time.Duration
			if crd != nil && crd.serves() {
				d = fast.Step()
			} else {
				d = backoff.Step()
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-changed:
				t.Stop()
				if !crd.serves() {
					continue
				}
			case <-t.C:
			}
			if isServed[T, L](ctx, lw) {
				return true
			}
		}
	}
}

// isServed reports whether lw's resource is served: whether one list of it is answered
// otherwise than 404 Not Found. Another error, or a panic, is the reflector's to report
// and retry: the cache lists again, and its reflector recovers the panic.
func isServed[T event.Object, L reflect.List](ctx context.Context, lw controller.ListerWatcher[T, L]) (served bool) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			klog.FromContext(ctx).Error(fmt.Errorf("panic: %v", v), "The ListerWatcher panicked while checking whether its resource is served; the cache lists again")
			served = ctx.Err() == nil
		}
	}()
	_, err := lw.List(ctx, metav1.ListOptions{Limit: 1})
	return ctx.Err() == nil && !apierrors.IsNotFound(err)
}

// crdWatch watches one CustomResourceDefinition while a waiter waits for its resource.
type crdWatch struct {
	gvr     schema.GroupVersionResource
	changed chan struct{} // has a value when serving changed since last read

	mu    sync.Mutex
	serve bool

	cancel context.CancelFunc
	done   chan struct{}
}

// watchCRD starts watching the CustomResourceDefinition of gvr through client. It returns
// nil, having logged why, when it cannot: the cache then checks on its backoff's
// schedule only.
func watchCRD(ctx context.Context, client CRDClient, cache string, gvr schema.GroupVersionResource) *crdWatch {
	name := gvr.Resource + "." + gvr.Group
	c, err := controller.New(client, controller.Options[*apiextensionsv1.CustomResourceDefinition]{
		Options: reflect.Options[*apiextensionsv1.CustomResourceDefinition]{
			Name: "CustomResourceDefinition " + name + " of cache " + cache,
			ListOptions: func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			},
		},
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "cannot watch the CustomResourceDefinition; checking on the backoff's schedule only", "cache", cache)
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &crdWatch{gvr: gvr, changed: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	// Registered before Run: it cannot fail.
	_, _ = c.AddHandler("served", controller.HandlerFunc[*apiextensionsv1.CustomResourceDefinition](
		func(_ context.Context, e event.Event[*apiextensionsv1.CustomResourceDefinition]) {
			if e.Key != name {
				return
			}
			w.set(e.Type != event.Deleted && crdServes(e.Object, gvr))
		}))
	go func() {
		defer close(w.done)
		_ = c.Run(ctx)
	}()
	return w
}

func (w *crdWatch) set(serve bool) {
	w.mu.Lock()
	changed := w.serve != serve
	w.serve = serve
	w.mu.Unlock()
	if changed {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

func (w *crdWatch) serves() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.serve
}

func (w *crdWatch) stop() {
	w.cancel()
	<-w.done
}

// crdServes reports whether crd serves gvr: established, not being deleted, with gvr's
// group and plural name, and serving gvr's version (any, when gvr has none).
func crdServes(crd *apiextensionsv1.CustomResourceDefinition, gvr schema.GroupVersionResource) bool {
	if crd == nil || crd.DeletionTimestamp != nil || crd.Spec.Group != gvr.Group || crd.Spec.Names.Plural != gvr.Resource {
		return false
	}
	established := false
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			established = true
		}
	}
	if !established {
		return false
	}
	for _, v := range crd.Spec.Versions {
		if v.Served && (gvr.Version == "" || v.Name == gvr.Version) {
			return true
		}
	}
	return false
}
