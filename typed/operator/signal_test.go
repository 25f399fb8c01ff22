package operator_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/typedinformer/typedinformer/typed/operator"
)

func TestTheFirstSignalEndsTheContext(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		ctx, stop := operator.SignalContext(context.Background())
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, operator.ErrSignal) || !strings.Contains(cause.Error(), sig.String()) {
				t.Errorf("cause = %v, want ErrSignal naming %v", cause, sig)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v did not end the context", sig)
		}
		stop()
	}
}

func TestStopEndsTheContextAndItsGoroutine(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	ctx, stop := operator.SignalContext(parent)
	cancel()
	<-ctx.Done() // the parent's end ends it
	stop()
	stop() // twice is harmless
	// goleak (TestMain) checks that the goroutine is gone.
}

const childEnv = "OPERATOR_SIGNAL_CHILD"

// signalChild is the subprocess of TestASecondSignalExitsAtOnce: a program whose
// shutdown never ends.
func signalChild() {
	ctx, stop := operator.SignalContext(context.Background())
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("shutting down")
	select {} // a shutdown that hangs
}

// As with controller-runtime's SetupSignalHandler, a second signal during a slow
// shutdown exits at once, with status 1.
func TestASecondSignalExitsAtOnce(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	expect := func(want string) {
		t.Helper()
		if !lines.Scan() || lines.Text() != want {
			t.Fatalf("child said %q (%v), want %q", lines.Text(), lines.Err(), want)
		}
	}
	expect("ready")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect("shutting down")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("child exited with %v, want status 1", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("the second signal did not end the child")
	}
}
