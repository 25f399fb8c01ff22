package operator

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/homedir"
)

// Config returns the configuration of the clients to the cluster, from the first of
// these sources that is set, in controller-runtime's order (ctrl.GetConfig):
//
//  1. the -kubeconfig flag (Flags.Kubeconfig): that file, which must exist;
//  2. $KUBECONFIG: its files, merged as kubectl merges them;
//  3. in a pod ($KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT set): the pod's
//     service account (its token and CA certificate in ServiceAccountDir), as
//     rest.InClusterConfig reads them;
//  4. ~/.kube/config, when it exists.
//
// A source that is set but unusable (a file missing, a token unreadable) is an error
// naming it: Config does not fall back to another cluster than the one asked for. When
// no source is set, the error wraps ErrNoConfig and says why each was passed over.
func (f *Flags) Config() (*rest.Config, error) {
	cfg, _, err := f.config()
	return cfg, err
}

// config returns the client configuration and, when it came from a kubeconfig, its
// context's namespace ("default" when the context names none).
func (f *Flags) config() (*rest.Config, string, error) {
	if f == nil {
		return nil, "", fmt.Errorf("%w: nil *Flags", ErrNoConfig)
	}
	if f.Kubeconfig != "" {
		return fromKubeconfig("-kubeconfig "+f.Kubeconfig, &clientcmd.ClientConfigLoadingRules{ExplicitPath: f.Kubeconfig})
	}
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules() // $KUBECONFIG's list
		return fromKubeconfig("$KUBECONFIG "+env, rules)
	}
	tried := []string{"-kubeconfig (unset)", "$KUBECONFIG (unset)"}
	cfg, err := inCluster(f.serviceAccountDir())
	switch {
	case err == nil:
		return cfg, "", nil
	case !errors.Is(err, rest.ErrNotInCluster):
		return nil, "", fmt.Errorf("the pod's service account in %s: %w", f.serviceAccountDir(), err)
	}
	tried = append(tried, "in-cluster (not in a pod: $KUBERNETES_SERVICE_HOST or $KUBERNETES_SERVICE_PORT unset)")
	home := filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
	if _, err := os.Stat(home); err != nil {
		tried = append(tried, fmt.Sprintf("%s (%v)", home, err))
		return nil, "", fmt.Errorf("%w: tried %s", ErrNoConfig, strings.Join(tried, ", "))
	}
	return fromKubeconfig(home, &clientcmd.ClientConfigLoadingRules{ExplicitPath: home})
}

// fromKubeconfig loads the kubeconfig that rules name, source in its errors.
func fromKubeconfig(source string, rules *clientcmd.ClientConfigLoadingRules) (*rest.Config, string, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", source, err)
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", source, err)
	}
	return cfg, ns, nil
}

// inCluster is rest.InClusterConfig with the service account's directory as a
// parameter: rest.InClusterConfig reads the constant DefaultServiceAccountDir, which a
// test cannot provide. It returns rest.ErrNotInCluster outside a pod.
func inCluster(dir string) (*rest.Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, rest.ErrNotInCluster
	}
	tokenFile := filepath.Join(dir, "token")
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	if _, err := certutil.NewPool(caFile); err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		TLSClientConfig: rest.TLSClientConfig{CAFile: caFile},
		BearerToken:     string(token),
		BearerTokenFile: tokenFile, // client-go rereads it: projected tokens are rotated
	}, nil
}

func (f *Flags) serviceAccountDir() string {
	if f.ServiceAccountDir != "" {
		return f.ServiceAccountDir
	}
	return DefaultServiceAccountDir
}
