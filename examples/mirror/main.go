package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// main runs the mirror controller against the cluster in $KUBECONFIG until interrupted.
func main() {
	ns := flag.String("namespace", "default", "namespace to mirror ConfigMaps in")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		klog.Fatalf("loading kubeconfig: %v", err)
	}
	if err := Mirror(ctx, kubernetes.NewForConfigOrDie(cfg), *ns); err != nil {
		klog.Fatal(err)
	}
}
