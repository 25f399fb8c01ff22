//go:build unix

package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// etcdGracePeriod is how long etcd may take to exit after SIGTERM before it
// gets SIGKILL. etcd waits up to 7 s for the watch streams of clients (a
// running apiserver has some) to end before it closes them; killing it loses
// nothing, since every acknowledged write is already in its write-ahead log
// (--unsafe-no-fsync skips only the fsync, which matters for power cuts, not
// for a killed process).
const etcdGracePeriod = 2 * time.Second

// etcdArgs returns the command line of etcd.
func (env *Environment) etcdArgs() []string {
	client := env.EtcdURL()
	peer := fmt.Sprintf("http://127.0.0.1:%d", env.etcdPeerPort)
	return []string{
		"--name=" + env.etcdName,
		"--data-dir=" + filepath.Join(env.dir, "etcd-data"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + env.etcdName + "=" + peer,
		"--initial-cluster-state=new",
		"--initial-cluster-token=" + env.etcdName,
		"--enable-grpc-gateway=true",
		// Test data need not survive a power cut.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

// startEtcdLocked starts etcd and waits until it is healthy. env.mu is held.
func (env *Environment) startEtcdLocked(ctx context.Context) (*process, error) {
	return env.startAndWait(ctx, etcdBinary, env.etcdArgs(), "etcd.log", "healthy", env.etcdHealthy)
}

// etcdHealthy checks that the etcd on our port is ours, by its member name,
// and healthy.
func (env *Environment) etcdHealthy(ctx context.Context) error {
	var members struct {
		Members []struct {
			Name string `json:"name"`
		} `json:"members"`
	}
	if err := env.etcdCall(ctx, "/v3/cluster/member/list", map[string]any{}, &members); err != nil {
		return err
	}
	if len(members.Members) != 1 || members.Members[0].Name != env.etcdName {
		return fmt.Errorf("the etcd at %s is not ours: its members are %+v", env.EtcdURL(), members.Members)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.EtcdURL()+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := env.etcdHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var health struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil {
		return fmt.Errorf("etcd /health: status %s: %w", resp.Status, err)
	}
	if health.Health != "true" {
		return fmt.Errorf("etcd /health: %q %s", health.Health, health.Reason)
	}
	return nil
}

// etcdError is an error answer of etcd's JSON gateway.
type etcdError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *etcdError) Error() string { return fmt.Sprintf("etcd: %s (code %d)", e.Message, e.Code) }

// etcdCall POSTs request as JSON to etcd's gRPC gateway at path and decodes
// the answer into response.
func (env *Environment) etcdCall(ctx context.Context, path string, request, response any) error {
	body, err := json.Marshal(request)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.EtcdURL()+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := env.etcdHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e etcdError
		if json.Unmarshal(data, &e) == nil && e.Message != "" {
			return &e
		}
		return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, response); err != nil {
		return fmt.Errorf("etcd %s: decoding %q: %w", path, data, err)
	}
	return nil
}

// EtcdRevision returns the current revision of etcd's key-value store, which
// is what the apiserver uses as resource version. etcd must be running.
func (env *Environment) EtcdRevision(ctx context.Context) (int64, error) {
	var resp struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// A range over the single key "\x00", which no one uses: only the header
	// matters.
	if err := env.etcdCall(ctx, "/v3/kv/range", map[string]any{"key": "AA==", "keys_only": true}, &resp); err != nil {
		return 0, fmt.Errorf("testenv: reading the etcd revision: %w", err)
	}
	rev, err := strconv.ParseInt(resp.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("testenv: reading the etcd revision: bad revision %q", resp.Header.Revision)
	}
	return rev, nil
}

// CompactEtcd compacts etcd's history up to its current revision, physically
// (it returns once the old revisions are gone), and returns that revision.
// Afterwards a watch or list from an older resource version that reaches etcd
// fails with 410 Gone; note that the apiserver's watch cache keeps serving
// its own in-memory history until the apiserver restarts. Compacting again
// with no writes in between is not an error. etcd must be running.
func (env *Environment) CompactEtcd(ctx context.Context) (int64, error) {
	rev, err := env.EtcdRevision(ctx)
	if err != nil {
		return 0, err
	}
	var resp struct{}
	err = env.etcdCall(ctx, "/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, &resp)
	if e, ok := err.(*etcdError); ok && strings.Contains(e.Message, "required revision has been compacted") {
		err = nil // already compacted to rev
	}
	if err != nil {
		return 0, fmt.Errorf("testenv: compacting etcd to revision %d: %w", rev, err)
	}
	env.log.V(1).Info("Compacted etcd", "revision", rev)
	return rev, nil
}
