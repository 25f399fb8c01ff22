// Command website-operator runs one replica of the Website operator (package website)
// against the cluster of -kubeconfig, $KUBECONFIG, the pod it runs in, or ~/.kube/config,
// serving Prometheus metrics on :8080, probes on :8081 and, given -webhook-cert-path, the
// Website's webhooks (defaulting, validation, v1/v2 conversion) on :9443. Run several: one leads (the
// Lease website-operator) and reconciles, the others keep warm caches and take over.
// It is a module of its own because it depends on Prometheus's client, which the
// library's module does not.
//
//	go run -C examples/website/cmd/website-operator . -namespace default -install-crd
package main

import (
	"flag"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/metrics/prometheus"
	"github.com/typedinformer/typedinformer/typed/operator"
)

func main() {
	flags := operator.Register(flag.CommandLine, operator.Defaults(website.Component), operator.WithKlog)
	namespace := flag.String("namespace", "", "the namespace whose Websites to manage (all when empty)")
	installCRD := flag.Bool("install-crd", false, "install or upgrade the Website CRD before starting (v2 too with -webhook-cert-path)")
	flag.Parse()
	operator.Main(flags, func(cfg *rest.Config, opts manager.Options) (*website.Operator, error) {
		pm := prometheus.New(prometheus.Options{})
		opts.Metrics, opts.MetricsHandler = pm, pm.Handler()
		if *installCRD { // both versions when it serves the conversion webhook, v1 alone when not
			opts.InstallCRDs = &manager.CRDInstall{Client: apiextensionsclient.NewForConfigOrDie(cfg), Definitions: []*crd.Definition{website.DefinitionFor(opts.Webhook != nil)}}
		}
		return website.New(kubernetes.NewForConfigOrDie(cfg), cfg, website.Options{Namespace: *namespace, Manager: opts})
	})
}
