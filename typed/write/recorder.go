package write

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/typedinformer/typedinformer/controller"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/internal/guard"
)

// maxWaitingEvents bounds the events a Recorder keeps while it is not running.
const maxWaitingEvents = 100

// Recorder records Kubernetes Events (events.k8s.io/v1) about objects, through
// client-go's tools/events broadcaster, which aggregates repeated events into series and
// retries failed writes. It is an events.EventRecorderLogger, so it fits wherever
// client-go expects one:
//
//	recorder.Eventf(website, deployment, corev1.EventTypeNormal, "Created", "CreateDeployment", "created %s", deployment.Name)
//
// The regarding and related objects need their kind: objects from generated clients are
// looked up in client-go's scheme, and a custom resource's Go struct must carry its
// apiVersion and kind (objects read through FromDynamic do); an event about an object
// whose kind is unknown is logged as an error and dropped, as client-go does.
//
// A Recorder records while Run runs, so that, like a controller, it leaves no goroutine
// behind: a program runs it next to its controllers (typed.RunAll, or a manager runnable). The
// events of up to 100 Eventf calls made while it is not running wait for Run; further
// ones are dropped and logged. Events are best effort, as everywhere in Kubernetes.
type Recorder struct {
	s      *recorderState
	logger *klog.Logger // set by WithLogger; Run's context's when nil
}

type recorderState struct {
	client    kubernetes.Interface
	component string

	mu      sync.Mutex
	running bool
	rec     events.EventRecorderLogger // the running broadcaster's; nil when not recording
	waiting []func(events.EventRecorderLogger)
}

var _ events.EventRecorderLogger = (*Recorder)(nil)

// NewRecorder returns a Recorder that writes events through client as component, the
// events' reportingController, which the API server requires to be a qualified name such
// as "website-operator" or "example.com/website". It returns an error wrapping
// controller.ErrNilArgument for a nil client, and an error for a component the server would refuse.
func NewRecorder(client kubernetes.Interface, component string) (*Recorder, error) {
	if guard.IsNil(client) {
		return nil, fmt.Errorf("%w: the Recorder's client", controller.ErrNilArgument)
	}
	if errs := validation.IsQualifiedName(component); len(errs) > 0 {
		return nil, fmt.Errorf("the Recorder's component %q is not a qualified name: %s", component, strings.Join(errs, "; "))
	}
	return &Recorder{s: &recorderState{client: client, component: component}}, nil
}

// Run records events until ctx ends: it starts a tools/events broadcaster writing to the
// API server, first hands it the events that waited, and when ctx ends stops it. Events
// still being written are abandoned with ctx, and every goroutine the broadcaster started
// ends with it. Run can be called again after it returns, but not twice at once
// (an error wrapping controller.ErrAlreadyRunning).
func (r *Recorder) Run(ctx context.Context) error {
	if r == nil || r.s == nil {
		return fmt.Errorf("%w: the Recorder", controller.ErrNilArgument)
	}
	s := r.s
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return fmt.Errorf("recorder %q: %w", r.s.component, controller.ErrAlreadyRunning)
	}
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()

	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: s.client.EventsV1()})
	defer b.Shutdown()
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("starting to record events: %w", err)
	}
	rec := b.NewRecorder(scheme.Scheme, s.component).WithLogger(klog.FromContext(ctx))
	s.mu.Lock()
	s.rec = rec
	waiting := s.waiting
	s.waiting = nil
	s.mu.Unlock()
	for _, record := range waiting {
		record(rec)
	}
	<-ctx.Done()
	s.mu.Lock()
	s.rec = nil
	s.mu.Unlock()
	return nil
}

// Eventf records an event about regarding (and related, which may be nil) of type
// eventtype (corev1.EventTypeNormal or EventTypeWarning), with a reason and an action in
// UpperCamelCase, and a note formatted from note and args. It never blocks on the API
// server. A nil Recorder records nothing. An event about a nil object (typed nil
// included) is logged as an error and dropped, and a typed-nil related object is none.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if r == nil || r.s == nil {
		return
	}
	if guard.IsNil(regarding) {
		// client-go reads its kind, which panics, on the caller's goroutine or, for an
		// event recorded before Run, on Run's.
		r.log().Error(fmt.Errorf("%w: the event's regarding object %#v", controller.ErrNilArgument, regarding), "Dropped an event", "component", r.s.component, "reason", reason)
		return
	}
	if guard.IsNil(related) {
		related = nil
	}
	r.record(func(rec events.EventRecorderLogger) {
		rec.Eventf(regarding, related, eventtype, reason, action, note, args...)
	})
}

// WithLogger returns a Recorder that shares r's broadcaster and logs its problems
// (an object whose kind is unknown, say) to logger, such as a reconcile's
// klog.FromContext(ctx).
func (r *Recorder) WithLogger(logger klog.Logger) events.EventRecorderLogger {
	if r == nil {
		return r
	}
	return &Recorder{s: r.s, logger: &logger}
}

func (r *Recorder) record(event func(events.EventRecorderLogger)) {
	s := r.s
	s.mu.Lock()
	rec := s.rec
	if rec == nil {
		dropped := len(s.waiting) >= maxWaitingEvents
		if !dropped {
			logger := r.logger
			s.waiting = append(s.waiting, func(rec events.EventRecorderLogger) {
				if logger != nil {
					rec = rec.WithLogger(*logger)
				}
				event(rec)
			})
		}
		s.mu.Unlock()
		if dropped {
			r.log().Error(nil, "Dropped an event: the Recorder is not running and already holds the most events it keeps", "component", s.component, "max", maxWaitingEvents)
		}
		return
	}
	s.mu.Unlock()
	if r.logger != nil {
		rec = rec.WithLogger(*r.logger)
	}
	event(rec)
}

func (r *Recorder) log() klog.Logger {
	if r.logger != nil {
		return *r.logger
	}
	return klog.Background()
}
