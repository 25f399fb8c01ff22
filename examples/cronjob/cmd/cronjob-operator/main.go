// Command cronjob-operator runs the CronJob controller (package cronjob) against the
// cluster of -kubeconfig, $KUBECONFIG, the pod it runs in, or ~/.kube/config, under
// leader election (the Lease cronjob-controller), serving Prometheus metrics on :8080
// and probes on :8081. It is a module of its own because it depends on Prometheus's
// client, which the library's module does not.
//
//	go run -C examples/cronjob/cmd/cronjob-operator . -namespace default -install-crd
package main

import (
	"flag"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/examples/cronjob"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/metrics/prometheus"
	"github.com/typedinformer/typedinformer/typed/operator"
)

func main() {
	flags := operator.Register(flag.CommandLine, operator.Defaults(cronjob.Component), operator.WithKlog)
	namespace := flag.String("namespace", "", "the namespace whose CronJobs to manage (all when empty)")
	installCRD := flag.Bool("install-crd", false, "install or upgrade the CronJob CRD before starting")
	flag.Parse()
	operator.Main(flags, func(cfg *rest.Config, opts manager.Options) (*cronjob.Controller, error) {
		pm := prometheus.New(prometheus.Options{})
		opts.Metrics, opts.MetricsHandler = pm, pm.Handler()
		o := cronjob.Options{Namespace: *namespace, Manager: opts}
		if *installCRD {
			o.InstallCRD = apiextensionsclient.NewForConfigOrDie(cfg)
		}
		return cronjob.New(kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg), o)
	})
}
