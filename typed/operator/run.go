package operator

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// Run is an operator's main after its flags are parsed: it builds the client
// configuration and the Manager's options from f (Options), calls build with them, and
// runs what build returns (a *manager.Manager, or a type embedding one) until ctx ends
// or the process receives SIGTERM or SIGINT (SignalContext), whose Run then shuts down
// gracefully. It returns Run's error, nil after a clean shutdown; the main exits 1 on an
// error. A second signal during the shutdown exits the process at once with status 1.
//
// It returns an error wrapping controller.ErrNilArgument for a nil f or build, or a nil
// (or typed nil) result of build; a panic in build (a NewForConfigOrDie) is returned as a
// *controller.PanicError.
func Run[R manager.Runnable](ctx context.Context, f *Flags, build func(cfg *rest.Config, opts manager.Options) (R, error)) error {
	if f == nil || build == nil {
		return fmt.Errorf("%w: operator.Run needs flags and a build function", controller.ErrNilArgument)
	}
	cfg, opts, err := f.Options()
	if err != nil {
		return err
	}
	r, err := call(build, cfg, opts)
	if err != nil {
		return err
	}
	if guard.IsNil(r) {
		return fmt.Errorf("%w: build returned no %T", controller.ErrNilArgument, r)
	}
	if le := opts.LeaderElection; le != nil {
		klog.FromContext(ctx).Info("leader election", "lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
	}
	ctx, stop := SignalContext(ctx)
	defer stop()
	return r.Run(ctx)
}

// Main is Run for a main: it runs until SIGTERM or SIGINT, and exits the process with
// status 1, after logging the error, when Run returns one. It returns when Run returns
// nil, and the main with it, exiting 0.
func Main[R manager.Runnable](f *Flags, build func(cfg *rest.Config, opts manager.Options) (R, error)) {
	if err := Run(context.Background(), f, build); err != nil {
		klog.Background().Error(err, "exiting")
		klog.Flush()
		os.Exit(1)
	}
}

// call calls build, turning a panic into a *controller.PanicError.
func call[R any](build func(*rest.Config, manager.Options) (R, error), cfg *rest.Config, opts manager.Options) (r R, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &controller.PanicError{Kind: "build", Name: "operator.Run", Value: v, Stack: debug.Stack()}
		}
	}()
	return build(cfg, opts)
}

// SignalContext returns a context that ends, with a cause wrapping ErrSignal, when the
// process receives SIGTERM (what Kubernetes sends a pod it stops) or SIGINT (Ctrl-C), or
// when parent ends. After the first signal, a second one exits the process at once with
// status 1, as controller-runtime's SetupSignalHandler does: a shutdown that hangs can be
// cut short. stop stops listening for the signals (a signal after it is handled as Go
// does by default) and ends the context; call it when done, as Run does.
func SignalContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		logger := klog.FromContext(parent)
		select {
		case s := <-signals:
			logger.Info("shutting down; a second signal exits at once", "signal", s.String())
			cancel(fmt.Errorf("%w: %v", ErrSignal, s))
		case <-done:
			return
		}
		select {
		case s := <-signals:
			logger.Info("second signal: exiting at once", "signal", s.String())
			klog.Flush()
			os.Exit(1)
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(signals)
			close(done)
			<-stopped
			cancel(context.Canceled)
		})
	}
}
