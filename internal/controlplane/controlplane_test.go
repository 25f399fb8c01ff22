//go:build unix

package controlplane_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/internal/controlplane"
)

const namespace = "default"

// TestControlPlane starts one control plane and runs the steps in order:
// they share its state.
func TestControlPlane(t *testing.T) {
	started := time.Now()
	cp := controlplane.StartForTest(t)
	t.Logf("Start took %v", time.Since(started))

	admin := newClient(t, cp.AdminConfig())
	ctx := t.Context()

	t.Run("admin creates a ConfigMap", func(t *testing.T) {
		createConfigMap(t, admin, "first")
	})

	t.Run("user without roles is forbidden", func(t *testing.T) {
		alice := newClient(t, cp.UserConfig("alice", "developers"))
		_, err := alice.CoreV1().ConfigMaps(namespace).List(timeout(t), metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("listing ConfigMaps as alice: got %v, want Forbidden", err)
		}
		if !strings.Contains(err.Error(), `"alice"`) {
			t.Errorf("the Forbidden error does not name the user: %v", err)
		}
	})

	t.Run("restart apiserver", func(t *testing.T) {
		restarted := time.Now()
		if err := cp.RestartAPIServer(timeout(t)); err != nil {
			t.Fatal(err)
		}
		t.Logf("RestartAPIServer took %v", time.Since(restarted))
		getConfigMap(t, admin, "first")
	})

	t.Run("restart etcd", func(t *testing.T) {
		restarted := time.Now()
		if err := cp.RestartEtcd(timeout(t)); err != nil {
			t.Fatal(err)
		}
		t.Logf("RestartEtcd took %v", time.Since(restarted))
		getConfigMap(t, admin, "first")
		createConfigMap(t, admin, "after-etcd-restart")
	})

	t.Run("stop and start separately", func(t *testing.T) {
		if err := cp.StartEtcd(timeout(t)); err == nil {
			t.Fatal("StartEtcd while etcd runs: no error")
		}
		if err := cp.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if err := cp.StopAPIServer(); err != nil {
			t.Fatalf("second StopAPIServer: %v", err)
		}
		if err := cp.StopEtcd(); err != nil {
			t.Fatal(err)
		}
		if err := cp.StartAPIServer(timeout(t)); err == nil {
			t.Fatal("StartAPIServer without etcd: no error")
		}
		if err := cp.StartEtcd(timeout(t)); err != nil {
			t.Fatal(err)
		}
		if err := cp.StartAPIServer(timeout(t)); err != nil {
			t.Fatal(err)
		}
		getConfigMap(t, admin, "after-etcd-restart")
	})

	t.Run("stop apiserver while etcd is down", func(t *testing.T) {
		if err := cp.StopEtcd(); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		if err := cp.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		t.Logf("StopAPIServer without etcd took %v", time.Since(stopped))
		if err := cp.StartEtcd(timeout(t)); err != nil {
			t.Fatal(err)
		}
		if err := cp.StartAPIServer(timeout(t)); err != nil {
			t.Fatal(err)
		}
		getConfigMap(t, admin, "first")
	})

	t.Run("compaction expires old resource versions", func(t *testing.T) {
		cm := createConfigMap(t, admin, "compacted")
		oldRV := cm.ResourceVersion
		cm.Data = map[string]string{"updated": "yes"}
		if _, err := admin.CoreV1().ConfigMaps(namespace).Update(timeout(t), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		before, err := cp.EtcdRevision(timeout(t))
		if err != nil {
			t.Fatal(err)
		}
		rev, err := cp.CompactEtcd(timeout(t))
		if err != nil {
			t.Fatal(err)
		}
		if rev < before {
			t.Fatalf("CompactEtcd compacted to %d, below the revision %d read before", rev, before)
		}
		if err := cp.RestartAPIServer(timeout(t)); err != nil {
			t.Fatal(err)
		}
		expectGone(t, admin, "compacted", oldRV)
	})

	t.Run("kubeconfig", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := cp.WriteKubeconfig(path); err != nil {
			t.Fatal(err)
		}
		config, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		getConfigMap(t, newClient(t, config), "first")
	})

	t.Run("stop", func(t *testing.T) {
		etcdURL := cp.EtcdURL()
		stopped := time.Now()
		if err := cp.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("Stop took %v", time.Since(stopped))
		if err := cp.Stop(); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
		if _, err := os.Stat(cp.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the directory %s is still there: %v", cp.Dir(), err)
		}
		if _, err := http.Get(etcdURL + "/health"); err == nil {
			t.Error("etcd still answers after Stop")
		}
		if _, err := admin.CoreV1().ConfigMaps(namespace).Get(ctx, "first", metav1.GetOptions{}); err == nil {
			t.Error("the apiserver still answers after Stop")
		}
		if err := cp.StartEtcd(timeout(t)); err == nil {
			t.Error("StartEtcd after Stop: no error")
		}
	})
}

// expectGone watches the ConfigMap name from resourceVersion, which etcd has
// compacted away, and expects 410 Gone, either as the answer to the watch
// request or as an ERROR event.
func expectGone(t *testing.T, client kubernetes.Interface, name, resourceVersion string) {
	t.Helper()
	ctx := timeout(t)
	for {
		w, err := client.CoreV1().ConfigMaps(namespace).Watch(ctx, metav1.ListOptions{
			ResourceVersion: resourceVersion,
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		})
		if apierrors.IsTooManyRequests(err) && ctx.Err() == nil {
			// The new apiserver's watch cache may still be initializing.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				t.Fatalf("watch from compacted resource version %s: got %v, want 410 Gone", resourceVersion, err)
			}
			t.Logf("watch from compacted resource version %s failed with: %v", resourceVersion, err)
			return
		}
		defer w.Stop()
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed without an event")
			}
			status, isStatus := ev.Object.(*metav1.Status)
			if ev.Type != watch.Error || !isStatus || status.Code != http.StatusGone {
				t.Fatalf("watch from compacted resource version %s: got event %s %#v, want ERROR with code 410", resourceVersion, ev.Type, ev.Object)
			}
			t.Logf("watch from compacted resource version %s got ERROR event: %s", resourceVersion, status.Message)
			return
		case <-ctx.Done():
			t.Fatal("no event from a watch from a compacted resource version")
		}
	}
}

func TestStartWithoutBinaries(t *testing.T) {
	empty := t.TempDir()
	_, err := controlplane.Start(timeout(t), controlplane.Options{BinDir: empty})
	if err == nil || !strings.Contains(err.Error(), "make controlplane") {
		t.Fatalf("Start with an empty BinDir: got %v, want an error that says to run `make controlplane`", err)
	}

	t.Setenv(controlplane.EnvBinDir, empty)
	_, err = controlplane.Start(timeout(t), controlplane.Options{})
	if err == nil || !strings.Contains(err.Error(), empty) {
		t.Fatalf("Start with $%s empty: got %v, want an error that names %s", controlplane.EnvBinDir, err, empty)
	}
}

func TestStartFailureLeavesNothing(t *testing.T) {
	// An unknown flag makes kube-apiserver exit at once, after etcd started.
	_, err := controlplane.Start(timeout(t), controlplane.Options{
		Logger:             ktesting.NewLogger(t, ktesting.NewConfig()),
		ExtraAPIServerArgs: []string{"--no-such-flag"},
	})
	if err == nil {
		t.Fatal("Start with a bad apiserver flag: no error")
	}
	t.Logf("Start failed as expected: %v", err)
	if !strings.Contains(err.Error(), "unknown flag: --no-such-flag") {
		t.Errorf("the error lacks the tail of the apiserver log")
	}
	dir := regexp.MustCompile(`/\S*typedinformer-controlplane-\d+`).FindString(err.Error())
	if dir == "" {
		t.Fatal("the error does not name the directory")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start left %s behind: %v", dir, err)
	}
	// etcd's command line names the directory: no process may have it.
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range cmdlines {
		cmdline, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(cmdline), dir+"/") {
			t.Errorf("%s is still running: %s", filepath.Dir(path), strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
}

func newClient(t *testing.T, config *rest.Config) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func createConfigMap(t *testing.T, client kubernetes.Interface, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps(namespace).Create(timeout(t), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       map[string]string{"name": name},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating ConfigMap %s: %v", name, err)
	}
	return cm
}

func getConfigMap(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps(namespace).Get(timeout(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting ConfigMap %s: %v", name, err)
	}
	if cm.Data["name"] != name {
		t.Fatalf("ConfigMap %s has data %v", name, cm.Data)
	}
}

// timeout returns a context that ends after a minute, or with the test.
func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
