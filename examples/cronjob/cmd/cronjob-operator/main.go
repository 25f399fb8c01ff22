// Command cronjob-operator runs the CronJob controller (package cronjob) against the
// cluster of $KUBECONFIG, or the one it runs in, under leader election.
//
//	go run ./examples/cronjob/cmd/cronjob-operator -namespace default -install-crd
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/examples/cronjob"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
)

func main() {
	hostname, _ := os.Hostname()
	namespace := flag.String("namespace", os.Getenv("POD_NAMESPACE"), "the namespace whose CronJobs to manage (all when empty); its Lease is there too")
	identity := flag.String("identity", hostname, "this replica's identity for leader election")
	probes := flag.String("health-probe-address", ":8081", "where to serve /healthz and /readyz")
	installCRD := flag.Bool("install-crd", false, "install or upgrade the CronJob CRD before starting")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *namespace, *identity, *probes, *installCRD); err != nil {
		klog.Background().Error(err, "cronjob-operator")
		os.Exit(1)
	}
}

func run(ctx context.Context, namespace, identity, probes string, installCRD bool) error {
	// $KUBECONFIG (or ~/.kube/config) when there is one, the in-cluster config otherwise.
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return err
	}
	opts := cronjob.Options{Namespace: namespace, HealthProbeAddress: probes, LeaderElection: &leaderelection.Config{Identity: identity}}
	if installCRD {
		opts.InstallCRD = apiextensionsclient.NewForConfigOrDie(cfg)
	}
	c, err := cronjob.New(kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg), opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
