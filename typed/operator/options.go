package operator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/webhook"
)

// Options returns the client configuration (see Config) and the Manager's options the
// flags say: the metrics and probe addresses, MetricsAuth, LeaderElection (nil when
// -leader-elect is false) with its Client, Namespace, Name and Identity set, and Webhook
// (a webhook server of the certificate in -webhook-cert-path; nil when it is unset). Set the rest
// (Metrics and MetricsHandler, InstallCRDs, ...) before manager.New.
//
// Unless given by a flag, the Lease's namespace is, in this order, $POD_NAMESPACE (the
// downward API's, as client-go's in-cluster configuration reads it first), the pod's
// service account's (the namespace file of ServiceAccountDir), or the kubeconfig
// context's when the configuration came from a kubeconfig ("default" when its context
// names none); and the identity is $POD_NAME, or else the host name (a pod's name),
// followed by "_" and a random UUID, as controller-runtime makes it: two replicas never
// share one, not even a pod restarted with its name (a StatefulSet's), whose Lease
// record its predecessor may still hold.
func (f *Flags) Options() (*rest.Config, manager.Options, error) {
	if f == nil {
		return nil, manager.Options{}, fmt.Errorf("%w: nil *Flags", ErrFlag)
	}
	if err := errors.Join(f.errs...); err != nil {
		return nil, manager.Options{}, err
	}
	cfg, kubeconfigNamespace, err := f.config()
	if err != nil {
		return nil, manager.Options{}, err
	}
	opts := manager.Options{MetricsAddress: address(f.MetricsAddress), HealthProbeAddress: address(f.HealthProbeAddress)}
	if f.WebhookCertPath != "" {
		opts.Webhook = webhook.NewServer(webhook.ServerOptions{CertDir: f.WebhookCertPath, Port: f.WebhookPort})
	}
	if !f.MetricsAuth && !f.LeaderElection {
		return cfg, opts, nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, manager.Options{}, err
	}
	if f.MetricsAuth {
		if opts.MetricsAddress == "" {
			return nil, manager.Options{}, fmt.Errorf("%w -metrics-auth: no metrics are served (-metrics-bind-address is %q)", ErrFlag, f.MetricsAddress)
		}
		opts.MetricsAuth = cs
	}
	if f.LeaderElection {
		if f.LeaseName == "" {
			return nil, manager.Options{}, fmt.Errorf("%w -leader-elect: the program names no Lease (Flags.LeaseName)", ErrFlag)
		}
		ns, err := f.leaseNamespace(kubeconfigNamespace)
		if err != nil {
			return nil, manager.Options{}, err
		}
		opts.LeaderElection = &leaderelection.Config{Client: cs.CoordinationV1(), Namespace: ns, Name: f.LeaseName, Identity: f.identity()}
	}
	return cfg, opts, nil
}

// leaseNamespace returns the Lease's namespace (see Options).
func (f *Flags) leaseNamespace(kubeconfigNamespace string) (string, error) {
	if f.LeaderElectionNamespace != "" {
		return f.LeaderElectionNamespace, nil
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	file := filepath.Join(f.serviceAccountDir(), "namespace")
	data, err := os.ReadFile(file)
	if ns := strings.TrimSpace(string(data)); err == nil && ns != "" {
		return ns, nil
	}
	if kubeconfigNamespace != "" {
		return kubeconfigNamespace, nil
	}
	if err == nil {
		err = errors.New("empty")
	}
	return "", fmt.Errorf("%w -leader-election-namespace: unset, and so are $POD_NAMESPACE and the service account's namespace (%s: %v)", ErrFlag, file, err)
}

// identity returns this replica's identity (see Options).
func (f *Flags) identity() string {
	if f.Identity != "" {
		return f.Identity
	}
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname() // "" when unknown: the UUID alone is unique
	}
	return name + "_" + string(uuid.NewUUID())
}
