//go:build unix

package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	// apiServerGracePeriod is how long kube-apiserver may take to exit
	// after SIGTERM before it gets SIGKILL. With the shutdown flags below
	// it takes about a second.
	apiServerGracePeriod = 10 * time.Second
	// apiServerGracePeriodWithoutEtcd replaces apiServerGracePeriod while
	// etcd is down: the apiserver would spend 10 s or more trying to delete
	// its leases, and has nothing to save.
	apiServerGracePeriodWithoutEtcd = time.Second
)

// defaultFeatureGates are the feature gates kube-apiserver starts with. ShardedListAndWatch
// (alpha in v1.36, KEP-5866) makes the server apply ListOptions.ShardSelector, which
// package typed/shard sends. kube-apiserver merges repeated --feature-gates flags gate by
// gate, the last value of a gate winning, so Options.ExtraAPIServerArgs turn a gate off
// with --feature-gates=ShardedListAndWatch=false and add gates without repeating this one.
const defaultFeatureGates = "--feature-gates=ShardedListAndWatch=true"

// apiServerArgs returns the command line of kube-apiserver, ending with
// Options.ExtraAPIServerArgs.
func (env *Environment) apiServerArgs() []string {
	args := []string{
		"--etcd-servers=" + env.EtcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(env.apiPort),
		"--cert-dir=" + filepath.Join(env.dir, "apiserver-certs"), // unused: the files below are given
		"--tls-cert-file=" + env.pki.servingCertFile,
		"--tls-private-key-file=" + env.pki.servingKeyFile,
		"--client-ca-file=" + env.pki.caFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + env.pki.serviceAccountKeyFile,
		"--service-account-signing-key-file=" + env.pki.serviceAccountKeyFile,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		// There is no controller manager to create service accounts, so
		// this admission plugin would reject every pod.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		// Exit promptly on SIGTERM: no load balancer needs a delay, and open
		// watches would otherwise hold the shutdown for up to a minute.
		"--shutdown-delay-duration=0s",
		"--shutdown-watch-termination-grace-period=2s",
		defaultFeatureGates,
	}
	return append(args, env.extraAPIServerArgs...)
}

// startAPIServerLocked starts kube-apiserver and waits until it is ready.
// env.mu is held.
func (env *Environment) startAPIServerLocked(ctx context.Context) (*process, error) {
	return env.startAndWait(ctx, apiServerBinary, env.apiServerArgs(), "kube-apiserver.log", "ready", env.apiServerReady)
}

// apiServerReady checks, as the admin, that /readyz answers 200 and that the
// default namespace exists. The serving certificate is verified against our
// CA, so a foreign server on the port cannot pass.
func (env *Environment) apiServerReady(ctx context.Context) error {
	for _, path := range []string{"/readyz", "/api/v1/namespaces/default"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.admin.Host+path, nil)
		if err != nil {
			return err
		}
		resp, err := env.apiHTTP.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", path, resp.Status, failedChecks(body))
		}
	}
	return nil
}

// failedChecks keeps the failed checks ("[-]...") of a /readyz answer, or
// returns the whole body if there are none.
func failedChecks(body []byte) string {
	var failed []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "[-]") {
			failed = append(failed, line)
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(string(body))
	}
	return strings.Join(failed, "; ")
}
