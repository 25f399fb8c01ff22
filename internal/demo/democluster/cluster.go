// Package democluster is where the demos run (examples/demo, examples/shards): the
// cluster in $KUBECONFIG, or a local control plane that they start and stop themselves.
package democluster

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/typed/testenv"
)

// Cluster is where a demo runs: the cluster in $KUBECONFIG, or a local control plane
// that the demo started and must stop with Close.
type Cluster struct {
	// Config is the admin's (or $KUBECONFIG's) configuration.
	Config *rest.Config
	// Local is true for a local control plane, which is thrown away whole at the end.
	Local bool
	// Describe says which cluster it is, for a summary.
	Describe string
	close    func() error
}

// Close stops the local control plane; it does nothing for $KUBECONFIG's cluster.
func (c *Cluster) Close() error { return c.close() }

// Connect uses $KUBECONFIG when it is set and starts a local control plane with opts
// otherwise (its progress messages go to klog at verbosity 1 unless opts.Logger is set).
// It prints one line saying which.
func Connect(ctx context.Context, opts testenv.Options) (*Cluster, error) {
	if os.Getenv("KUBECONFIG") != "" {
		return connectKubeconfig()
	}
	return startLocal(ctx, opts)
}

func connectKubeconfig() (*Cluster, error) {
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
	return &Cluster{Config: config, Describe: describe, close: func() error { return nil }}, nil
}

func startLocal(ctx context.Context, opts testenv.Options) (*Cluster, error) {
	// One line, finished when the control plane is ready, so that the wait is explained
	// while it happens.
	fmt.Print("$KUBECONFIG is not set: starting a local control plane (etcd, kube-apiserver) ... ")
	started := time.Now()
	// Progress messages go to klog at verbosity 1 (-v=1); by default the demo prints
	// only its own lines.
	if opts.Logger.GetSink() == nil {
		opts.Logger = klog.Background().V(1)
	}
	cp, err := testenv.StartContext(ctx, opts)
	if err != nil {
		fmt.Println("failed")
		return nil, err
	}
	ready := time.Since(started)
	config := cp.AdminConfig()
	describe := fmt.Sprintf("local control plane at %s", config.Host)
	fmt.Printf("ready at %s in %s\n", config.Host, ready.Round(time.Millisecond))
	return &Cluster{
		Config:   config,
		Local:    true,
		Describe: fmt.Sprintf("%s (ready in %s)", describe, ready.Round(time.Millisecond)),
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
