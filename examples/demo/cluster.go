package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/internal/controlplane"
)

// cluster is where the demo runs: the cluster in $KUBECONFIG, or a local control plane
// that the demo started and must stop.
type cluster struct {
	config   *rest.Config
	local    bool
	describe string
	close    func() error
}

// connect uses $KUBECONFIG when it is set and starts a local control plane otherwise.
func connect(ctx context.Context) (*cluster, error) {
	if os.Getenv("KUBECONFIG") != "" {
		return connectKubeconfig()
	}
	return startLocal(ctx)
}

func connectKubeconfig() (*cluster, error) {
	// The loading rules honour a $KUBECONFIG that lists several files, as kubectl does.
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	config, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading $KUBECONFIG: %w", err)
	}
	// client-go's default of 5 requests per second would make the churn take a minute;
	// this is still gentle for a real cluster.
	if config.QPS == 0 {
		config.QPS, config.Burst = 100, 200
	}
	current := ""
	if raw, err := loader.RawConfig(); err == nil {
		current = raw.CurrentContext
	}
	describe := fmt.Sprintf("$KUBECONFIG (context %q, %s)", current, config.Host)
	fmt.Printf("using the cluster in %s\n", describe)
	return &cluster{config: config, describe: describe, close: func() error { return nil }}, nil
}

func startLocal(ctx context.Context) (*cluster, error) {
	// One line, finished when the control plane is ready, so that the wait is explained
	// while it happens.
	fmt.Print("$KUBECONFIG is not set: starting a local control plane (etcd, kube-apiserver) ... ")
	started := time.Now()
	// Progress messages go to klog at verbosity 1 (-v=1); by default the demo prints
	// only its own lines.
	cp, err := controlplane.Start(ctx, controlplane.Options{Logger: klog.Background().V(1)})
	if err != nil {
		fmt.Println("failed")
		return nil, err
	}
	ready := time.Since(started)
	config := cp.AdminConfig()
	describe := fmt.Sprintf("local control plane at %s", config.Host)
	fmt.Printf("ready at %s in %s\n", config.Host, ready.Round(time.Millisecond))
	return &cluster{
		config:   config,
		local:    true,
		describe: fmt.Sprintf("%s (ready in %s)", describe, ready.Round(time.Millisecond)),
		close: func() error {
			start := time.Now()
			if err := cp.Stop(); err != nil {
				return fmt.Errorf("stopping the control plane: %w", err)
			}
			fmt.Printf("stopped the local control plane in %s\n", time.Since(start).Round(time.Millisecond))
			return nil
		},
	}, nil
}
