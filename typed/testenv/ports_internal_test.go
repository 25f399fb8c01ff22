//go:build unix

package testenv

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartRetriesTakenPorts hands Start a taken port for etcd's first
// attempt and for the apiserver's first attempt: both must retry.
func TestStartRetriesTakenPorts(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	calls := 0
	t.Cleanup(func() { pickPorts = freePorts })
	pickPorts = func(n int) ([]int, error) {
		calls++
		ports, err := freePorts(n)
		if err == nil && (calls == 1 || calls == 3) {
			ports[0] = busyPort
		}
		return ports, err
	}

	env := Start(t, Options{})
	if calls != 4 {
		t.Errorf("Start picked ports %d times, want 4: two attempts each for etcd and kube-apiserver", calls)
	}
	if env.etcdClientPort == busyPort || env.apiPort == busyPort {
		t.Errorf("Start uses the taken port %d: etcd %d, kube-apiserver %d", busyPort, env.etcdClientPort, env.apiPort)
	}
	for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
		log, err := os.ReadFile(filepath.Join(env.Dir(), name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "address already in use") {
			t.Errorf("%s does not show the failed first attempt", name)
		}
	}
}
