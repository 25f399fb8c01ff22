// Package mainproc runs a program's main as a process in a test, as a user would run
// it: built once with -race, started with flags and the environment of a pod, its logs in
// the test's log, then signalled and awaited; for an operator's main (typed/operator),
// against a test environment of its own, with its Lease checked. The example operators'
// main tests share it.
package mainproc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/testenv"
)

// Binary is the main of the package in the test's working directory, built at its first
// use. Remove it from TestMain, after the tests.
type Binary struct {
	once sync.Once
	path string
	err  error
}

// Path builds the binary once for the test binary and returns its path, failing t if it
// does not build.
func (b *Binary) Path(t *testing.T) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "mainproc")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "main")
		// -race: the test binary's packages are built with it already, so this reuses them.
		if out, err := exec.Command("go", "build", "-race", "-o", b.path, ".").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Remove deletes the binary, if it was built.
func (b *Binary) Remove() {
	if b.path != "" {
		_ = os.RemoveAll(filepath.Dir(b.path))
	}
}

// FreeAddress returns a local address nothing listens on, for a program's flags.
func FreeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Process is a running program whose standard error goes to its test's log.
type Process struct {
	cmd *exec.Cmd
	// exited holds the exit error once the process has exited; whoever receives it puts
	// it back.
	exited chan error
}

// Start runs bin with args and, added to the test's environment, env; the process is
// killed at the test's end if it is still running.
func Start(t *testing.T, bin string, env []string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: cmd, exited: make(chan error, 1)}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		for s := bufio.NewScanner(logs); s.Scan(); {
			t.Log(s.Text())
		}
	}()
	go func() {
		<-logged // Wait closes the pipe: read it to its end first
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// WaitReady polls http://probes/readyz every 100ms until it answers 200 OK, failing t if
// the process exits first or ctx ends.
func (p *Process) WaitReady(ctx context.Context, t *testing.T, probes string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.exited:
			p.exited <- err // for Stop and the cleanup
			return false, fmt.Errorf("the program exited: %v", err)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probes+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("waiting for /readyz: %v", err)
	}
}

// Stop sends sig and waits up to within for the process to exit, returning its exit
// error (nil for status 0), or fails t if it does not exit in time.
func (p *Process) Stop(t *testing.T, sig os.Signal, within time.Duration) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err // for the cleanup
		return err
	case <-time.After(within):
		t.Fatalf("the program did not exit within %v of %v", within, sig)
		return nil
	}
}

// Operator is an operator's main run as in a pod, against a test environment of its own:
// in a namespace of its own, POD_NAME and POD_NAMESPACE set, its metrics and probes on
// free local ports, ready.
type Operator struct {
	Env       *testenv.Environment
	Clientset kubernetes.Interface // the environment's administrator's
	Namespace string
	Metrics   string // the address of /metrics
	pod       string
	process   *Process
}

// StartOperator starts a test environment and the main with -kubeconfig, -namespace,
// -metrics-bind-address, -health-probe-bind-address and args, and returns once /readyz
// answers 200 OK.
func StartOperator(ctx context.Context, t *testing.T, bin *Binary, pod string, args ...string) *Operator {
	t.Helper()
	env := testenv.Start(t, testenv.Options{})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(env.AdminConfig())
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: pod + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := &Operator{Env: env, Clientset: cs, Namespace: ns.Name, Metrics: FreeAddress(t), pod: pod}
	probes := FreeAddress(t)
	o.process = Start(t, bin.Path(t), []string{"POD_NAME=" + pod, "POD_NAMESPACE=" + ns.Name}, append([]string{"-kubeconfig", kubeconfig,
		"-namespace", ns.Name, "-metrics-bind-address", o.Metrics, "-health-probe-bind-address", probes}, args...)...)
	o.process.WaitReady(ctx, t, probes)
	return o
}

// Poll checks cond every 100ms until it holds, failing t after a minute or when ctx ends.
func Poll(ctx context.Context, t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// LeaseHolder returns who holds the Lease lease in the operator's namespace ("" for
// nobody).
func (o *Operator) LeaseHolder(ctx context.Context, t *testing.T, lease string) string {
	t.Helper()
	l, err := o.Clientset.CoordinationV1().Leases(o.Namespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// CheckLeads fails t unless the operator's pod holds the Lease lease: its identity is
// the pod's name and a unique suffix.
func (o *Operator) CheckLeads(ctx context.Context, t *testing.T, lease string) {
	t.Helper()
	if holder := o.LeaseHolder(ctx, t, lease); !strings.HasPrefix(holder, o.pod+"_") {
		t.Errorf("the Lease is held by %q, want %s_ and a unique suffix", holder, o.pod)
	}
}

// CheckGracefulStop sends SIGTERM and fails t unless the operator exits 0 within 30s
// having released the Lease lease.
func (o *Operator) CheckGracefulStop(ctx context.Context, t *testing.T, lease string) {
	t.Helper()
	if err := o.process.Stop(t, syscall.SIGTERM, 30*time.Second); err != nil {
		t.Errorf("after SIGTERM the operator exited with %v, want status 0", err)
	}
	if holder := o.LeaseHolder(ctx, t, lease); holder != "" {
		t.Errorf("after SIGTERM the Lease is still held by %q", holder)
	}
}
