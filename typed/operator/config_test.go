package operator_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/typedinformer/typedinformer/typed/operator"
)

// kubeconfig writes a kubeconfig for server, whose context has namespace, and returns
// its path.
func kubeconfig(t *testing.T, dir, server, namespace string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: namespace}
	cfg.CurrentContext = "x"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// serviceAccount writes a pod's service account directory (token, ca.crt, namespace)
// and returns it; an empty namespace writes no namespace file.
func serviceAccount(t *testing.T, namespace string) string {
	t.Helper()
	dir := t.TempDir()
	cert, _, err := certutil.GenerateSelfSignedCertKey("kubernetes.default.svc", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"token": "pod-token", "ca.crt": string(cert)}
	if namespace != "" {
		files["namespace"] = namespace
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// environment clears every source of configuration: no $KUBECONFIG, not in a pod, a
// home without .kube/config, no $POD_NAMESPACE or $POD_NAME.
func environment(t *testing.T) (home string) {
	t.Helper()
	home = t.TempDir()
	for _, v := range []string{"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE", "POD_NAME"} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", home)
	return home
}

func inPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
}

func homeKubeconfig(t *testing.T, home, server string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kubeconfig(t, t.TempDir(), server, ""), filepath.Join(home, ".kube", "config")); err != nil {
		t.Fatal(err)
	}
}

// Each source wins over every later one: -kubeconfig, $KUBECONFIG, the pod's service
// account, ~/.kube/config (controller-runtime's order).
func TestConfigSourcesInControllerRuntimesOrder(t *testing.T) {
	for _, c := range []struct {
		name       string
		kubeconfig bool // -kubeconfig
		env        bool // $KUBECONFIG
		pod        bool
		home       bool
		want       string
	}{
		{"-kubeconfig over all", true, true, true, true, "https://flag.example"},
		{"$KUBECONFIG over the pod and home", false, true, true, true, "https://env.example"},
		{"the pod over home", false, false, true, true, "https://10.0.0.1:443"},
		{"home last", false, false, false, true, "https://home.example"},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := environment(t)
			f := operator.Defaults("lease")
			if c.kubeconfig {
				f.Kubeconfig = kubeconfig(t, t.TempDir(), "https://flag.example", "")
			}
			if c.env {
				t.Setenv("KUBECONFIG", kubeconfig(t, t.TempDir(), "https://env.example", ""))
			}
			if c.pod {
				inPod(t)
				f.ServiceAccountDir = serviceAccount(t, "ns")
			}
			if c.home {
				homeKubeconfig(t, home, "https://home.example")
			}
			cfg, err := f.Config()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != c.want {
				t.Errorf("Host = %q, want %q", cfg.Host, c.want)
			}
		})
	}
}

func TestInClusterConfigIsThePodsServiceAccount(t *testing.T) {
	environment(t)
	inPod(t)
	f := operator.Defaults("lease")
	f.ServiceAccountDir = serviceAccount(t, "ns")
	cfg, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BearerToken != "pod-token" || cfg.BearerTokenFile != filepath.Join(f.ServiceAccountDir, "token") ||
		cfg.TLSClientConfig.CAFile != filepath.Join(f.ServiceAccountDir, "ca.crt") {
		t.Errorf("config = token %q, token file %q, CA %q; want the service account's", cfg.BearerToken, cfg.BearerTokenFile, cfg.TLSClientConfig.CAFile)
	}
}

// A source that is set but broken is an error naming it, not a fall back to another
// cluster; no source at all names every one tried.
func TestConfigErrorsNameTheSource(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, f *operator.Flags)
		want  []string
		noCfg bool
	}{
		{"a -kubeconfig that does not exist", func(t *testing.T, f *operator.Flags) {
			f.Kubeconfig = "/nonexistent/kubeconfig"
		}, []string{"-kubeconfig /nonexistent/kubeconfig"}, false},
		{"a $KUBECONFIG of files that do not exist", func(t *testing.T, f *operator.Flags) {
			t.Setenv("KUBECONFIG", "/nonexistent/a:/nonexistent/b")
		}, []string{"$KUBECONFIG /nonexistent/a:/nonexistent/b"}, false},
		{"a -kubeconfig that does not parse", func(t *testing.T, f *operator.Flags) {
			f.Kubeconfig = filepath.Join(t.TempDir(), "garbage")
			if err := os.WriteFile(f.Kubeconfig, []byte("{not yaml"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"-kubeconfig " + "", "garbage"}, false},
		{"a pod without its token", func(t *testing.T, f *operator.Flags) {
			inPod(t)
			f.ServiceAccountDir = t.TempDir()
		}, []string{"service account in ", "token"}, false},
		{"nothing at all", func(*testing.T, *operator.Flags) {}, []string{"-kubeconfig (unset)", "$KUBECONFIG (unset)", "in-cluster (not in a pod", ".kube/config"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			environment(t)
			f := operator.Defaults("lease")
			c.setup(t, &f)
			cfg, err := f.Config()
			if err == nil {
				t.Fatalf("Config = %v, want an error", cfg.Host)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Config's error %q does not say %q", err, w)
				}
			}
			if errors.Is(err, operator.ErrNoConfig) != c.noCfg {
				t.Errorf("errors.Is(%v, ErrNoConfig) = %v, want %v", err, !c.noCfg, c.noCfg)
			}
		})
	}
}
