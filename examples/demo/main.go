// Command demo is typedinformer's showcase, run by `make demo`: the Website operator of
// examples/website at work.
//
// Against the cluster in $KUBECONFIG or, when that is unset, a local etcd and
// kube-apiserver that it starts and stops itself, it installs the Website CRD, runs two
// replicas of the operator under leader election in a fresh namespace, and then, step by
// step: creates Websites, edits an owned Deployment and ConfigMap behind the operator's
// back, changes a Website's message, deletes a Website (its finalizer cleans up), and
// stops the leader while changes are made (the standby takes over and misses none). It
// times how long each step takes to converge, as seen from the API server, counts the
// reconciles, and ends with a summary: reconciles per replica, convergence per step, the
// Events the operator recorded, and its caches checked against a fresh List from the
// server.
//
// Exit status: 0 on success, 1 on an error, when a step does not converge or when a cache
// and the server disagree, 130 when interrupted. In every case it stops what it started
// and, on a real cluster, deletes its namespace (and the CRD, if it installed it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/internal/demo/democluster"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// settings are the demo's knobs.
type settings struct {
	websites int
	timeout  time.Duration
}

func main() {
	os.Exit(run())
}

func run() int {
	var s settings
	klog.InitFlags(nil) // -v=2 shows the library's logs; by default only its errors
	flag.IntVar(&s.websites, "websites", 3, "Websites created in the first step (at least 3)")
	flag.DurationVar(&s.timeout, "step-timeout", 30*time.Second, "how long a step may take to converge")
	flag.Parse()
	if s.websites < 3 {
		fmt.Fprintln(os.Stderr, "demo: -websites must be at least 3")
		return 2
	}

	wallStart := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, restore the default behaviour so that a second Ctrl-C
	// kills the demo at once if the clean-up hangs (the control plane's processes die
	// with it: they get SIGKILL when their parent dies).
	context.AfterFunc(ctx, stop)
	ctx = klog.NewContext(ctx, libraryLogger())

	err := demo(ctx, s)
	fmt.Printf("wall time %s\n", round(time.Since(wallStart)))
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "demo: interrupted; everything it started has been stopped")
		return 130
	default:
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
}

// demo runs the whole show. Its deferred calls undo, in reverse order, everything it
// set up, whether it returns normally, with an error or because ctx was cancelled.
func demo(ctx context.Context, s settings) (err error) {
	cl, err := democluster.Connect(ctx, testenv.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cl.Close()) }()
	// Clean-up must outlive a cancelled ctx.
	cleanupCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	}
	cs, err := kubernetes.NewForConfig(cl.Config)
	if err != nil {
		return fmt.Errorf("creating the clientset: %w", err)
	}
	ext, err := apiextensionsclient.NewForConfig(cl.Config)
	if err != nil {
		return fmt.Errorf("creating the apiextensions clientset: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cl.Config)
	if err != nil {
		return fmt.Errorf("creating the dynamic client: %w", err)
	}

	created, err := website.InstallCRD(ctx, ext)
	if err != nil {
		return err
	}
	if created {
		fmt.Printf("CRD       %s installed\n", website.CRDName)
	} else {
		fmt.Printf("CRD       %s already installed\n", website.CRDName)
	}
	if created && !cl.Local {
		defer func() {
			dctx, cancel := cleanupCtx()
			defer cancel()
			crds := ext.ApiextensionsV1().CustomResourceDefinitions()
			derr := crds.Delete(dctx, website.CRDName, metav1.DeleteOptions{})
			if derr == nil {
				// Wait for it to go, so that the next run does not find it being deleted.
				derr = wait.PollUntilContextCancel(dctx, poll, true, func(ctx context.Context) (bool, error) {
					_, err := crds.Get(ctx, website.CRDName, metav1.GetOptions{})
					return apierrors.IsNotFound(err), nil
				})
			}
			if derr != nil {
				err = errors.Join(err, fmt.Errorf("deleting the CRD: %w", derr))
				return
			}
			fmt.Printf("deleted CRD %s\n", website.CRDName)
		}()
	}

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "typedinformer-demo-",
		Labels:       map[string]string{"app.kubernetes.io/managed-by": "typedinformer-demo"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the namespace: %w", err)
	}
	fmt.Printf("namespace %s\n", ns.Name)
	if !cl.Local {
		// A local control plane is thrown away whole; on a real cluster the namespace must
		// go. Its Websites are deleted before, while the operator runs (see the show's
		// end): a Website's finalizer would otherwise hold the namespace forever.
		defer func() {
			dctx, cancel := cleanupCtx()
			defer cancel()
			if derr := cs.CoreV1().Namespaces().Delete(dctx, ns.Name, metav1.DeleteOptions{}); derr != nil {
				err = errors.Join(err, fmt.Errorf("deleting namespace %s: %w", ns.Name, derr))
				return
			}
			fmt.Printf("deleted namespace %s\n", ns.Name)
		}()
	}

	sh := &show{s: s, ns: ns.Name, cs: cs, websites: client.FromDynamicNamespaced[*website.Website](dyn.Resource(website.Resource)),
		dyn: dyn.Resource(website.Resource).Namespace(ns.Name)}
	defer func() { err = errors.Join(err, sh.stopAll()) }()
	if !cl.Local {
		// Runs first: after an error or an interruption, Websites may be left whose
		// finalizer no replica will remove any more, which would hold the namespace (and
		// the CRD) forever.
		defer func() {
			dctx, cancel := cleanupCtx()
			defer cancel()
			err = errors.Join(err, sh.release(dctx))
		}()
	}
	return sh.run(ctx, cl)
}

// round rounds a duration for display, more finely when it is short.
func round(d time.Duration) time.Duration {
	switch {
	case d < 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d < time.Second:
		return d.Round(time.Millisecond)
	default:
		return d.Round(10 * time.Millisecond)
	}
}
