package operator_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/operator"
)

// An operator's main: the flags, then Run, which builds the client configuration and
// the Manager's options from them, lets the program build its Manager, and runs it
// until SIGTERM or SIGINT. Here the command line is given, and the context ends at once.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig") // a kubeconfig file, as kubectl writes one
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"], cfg.Contexts["c"], cfg.CurrentContext = &clientcmdapi.Cluster{Server: "https://cluster.example"}, &clientcmdapi.Context{Cluster: "c"}, "c"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		fmt.Println(err)
		return
	}

	fs := flag.NewFlagSet("website-operator", flag.ExitOnError) // flag.CommandLine in a main
	flags := operator.Register(fs, operator.Defaults("website-operator"), operator.WithKlog)
	_ = fs.Parse([]string{"-kubeconfig", kubeconfig, "-leader-elect=false", "-metrics-bind-address=0", "-health-probe-bind-address=0"})

	ctx, cancel := context.WithCancel(context.Background()) // context.Background() in a main
	cancel()
	err := operator.Run(ctx, flags, func(cfg *rest.Config, opts manager.Options) (*manager.Manager, error) {
		fmt.Printf("cluster %s, metrics %q, probes %q, leader election %v\n", cfg.Host, opts.MetricsAddress, opts.HealthProbeAddress, opts.LeaderElection != nil)
		return manager.New(opts), nil // set opts.Metrics and MetricsHandler first; add loops to the Manager
	})
	fmt.Println("Run:", err) // a main exits 1 on an error
	// Output:
	// cluster https://cluster.example, metrics "", probes "", leader election false
	// Run: <nil>
}
