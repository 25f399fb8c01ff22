// Command website-operator runs one replica of the Website operator (package website)
// against the cluster of $KUBECONFIG, or the one it runs in. Run several, each with its
// own -identity: one leads and reconciles, the others keep warm caches and take over.
//
//	go run ./examples/website/cmd/website-operator -namespace default -install-crd
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

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
)

func main() {
	hostname, _ := os.Hostname()
	namespace := flag.String("namespace", os.Getenv("POD_NAMESPACE"), "the namespace whose Websites to manage (all when empty); its Lease is there too")
	identity := flag.String("identity", hostname, "this replica's identity for leader election")
	probes := flag.String("health-probe-address", ":8081", "where to serve /healthz and /readyz")
	installCRD := flag.Bool("install-crd", false, "create the Website CRD first if it is missing")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *namespace, *identity, *probes, *installCRD); err != nil {
		klog.Background().Error(err, "website-operator")
		os.Exit(1)
	}
}

func run(ctx context.Context, namespace, identity, probes string, installCRD bool) error {
	// $KUBECONFIG (or ~/.kube/config) when there is one, the in-cluster config otherwise.
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return err
	}
	if installCRD {
		if _, err := website.InstallCRD(ctx, apiextensionsclient.NewForConfigOrDie(cfg)); err != nil {
			return err
		}
	}
	op, err := website.New(kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg), website.Options{
		Namespace: namespace, HealthProbeAddress: probes, LeaderElection: leaderelection.Config{Identity: identity},
	})
	if err != nil {
		return err
	}
	return op.Run(ctx)
}
