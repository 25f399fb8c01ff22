//go:build unix

package testenv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/typed/testenv"
)

const namespace = "default"

// TestEnvironment starts one environment and runs the steps in order: they share its
// state. Each step states one guarantee.
func TestEnvironment(t *testing.T) {
	started := time.Now()
	env := testenv.Start(t, testenv.Options{})
	t.Logf("Start took %v", time.Since(started))

	admin := newClient(t, env.AdminConfig())
	ctx := t.Context()

	t.Run("admin may do anything", func(t *testing.T) {
		createConfigMap(t, admin, "first")
	})

	t.Run("webhooks installed are called by the API server when InstallWebhooks returns", func(t *testing.T) {
		webhookSteps(t, env, admin)
	})

	t.Run("a user has no permissions until granted", func(t *testing.T) {
		alice := newClient(t, env.UserConfig("alice", "developers"))
		_, err := alice.CoreV1().ConfigMaps(namespace).List(timeout(t), metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("listing ConfigMaps as alice: got %v, want Forbidden", err)
		}
		if !strings.Contains(err.Error(), `"alice"`) {
			t.Errorf("the Forbidden error does not name the user: %v", err)
		}
	})

	t.Run("restart apiserver keeps the data", func(t *testing.T) {
		restarted := time.Now()
		if err := env.RestartAPIServer(timeout(t)); err != nil {
			t.Fatal(err)
		}
		t.Logf("RestartAPIServer took %v", time.Since(restarted))
		getConfigMap(t, admin, "first")
	})

	t.Run("restart etcd keeps the data", func(t *testing.T) {
		restarted := time.Now()
		if err := env.RestartEtcd(timeout(t)); err != nil {
			t.Fatal(err)
		}
		t.Logf("RestartEtcd took %v", time.Since(restarted))
		getConfigMap(t, admin, "first")
		createConfigMap(t, admin, "after-etcd-restart")
	})

	t.Run("stop and start each process", func(t *testing.T) {
		if err := env.StartEtcd(timeout(t)); err == nil {
			t.Fatal("StartEtcd while etcd runs: no error")
		}
		if err := env.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().ConfigMaps(namespace).Get(timeout(t), "first", metav1.GetOptions{}); err == nil {
			t.Error("the apiserver answers after StopAPIServer")
		}
		if err := env.StopAPIServer(); err != nil {
			t.Fatalf("second StopAPIServer: %v", err)
		}
		if err := env.StopEtcd(); err != nil {
			t.Fatal(err)
		}
		if err := env.StartAPIServer(timeout(t)); err == nil {
			t.Fatal("StartAPIServer without etcd: no error")
		}
		if err := env.StartEtcd(timeout(t)); err != nil {
			t.Fatal(err)
		}
		if err := env.StartAPIServer(timeout(t)); err != nil {
			t.Fatal(err)
		}
		getConfigMap(t, admin, "after-etcd-restart")
	})

	t.Run("stop apiserver while etcd is down", func(t *testing.T) {
		if err := env.StopEtcd(); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		if err := env.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		t.Logf("StopAPIServer without etcd took %v", time.Since(stopped))
		if err := env.StartEtcd(timeout(t)); err != nil {
			t.Fatal(err)
		}
		if err := env.StartAPIServer(timeout(t)); err != nil {
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
		before, err := env.EtcdRevision(timeout(t))
		if err != nil {
			t.Fatal(err)
		}
		rev, err := env.CompactEtcd(timeout(t))
		if err != nil {
			t.Fatal(err)
		}
		if rev < before {
			t.Fatalf("CompactEtcd compacted to %d, below the revision %d read before", rev, before)
		}
		if err := env.RestartAPIServer(timeout(t)); err != nil {
			t.Fatal(err)
		}
		expectGone(t, admin, "compacted", oldRV)
	})

	t.Run("kubeconfig", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := env.WriteKubeconfig(path); err != nil {
			t.Fatal(err)
		}
		config, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		getConfigMap(t, newClient(t, config), "first")
	})

	t.Run("stop ends everything, once", func(t *testing.T) {
		etcdURL := env.EtcdURL()
		stopped := time.Now()
		if err := env.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("Stop took %v", time.Since(stopped))
		if err := env.Stop(); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
		if _, err := os.Stat(env.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the directory %s is still there: %v", env.Dir(), err)
		}
		if _, err := http.Get(etcdURL + "/health"); err == nil {
			t.Error("etcd still answers after Stop")
		}
		if _, err := admin.CoreV1().ConfigMaps(namespace).Get(ctx, "first", metav1.GetOptions{}); err == nil {
			t.Error("the apiserver still answers after Stop")
		}
		if err := env.StartEtcd(timeout(t)); err == nil {
			t.Error("StartEtcd after Stop: no error")
		}
		if err := env.StartAPIServer(timeout(t)); err == nil {
			t.Error("StartAPIServer after Stop: no error")
		}
	})
}

// TestNothingLeftAfterStop: once Stop returns, neither process runs any more and no
// goroutine of the package is left; while the environment runs, the goroutines it
// runs are exactly those SpawnerFunction and WaiterFunction name, whatever was done
// with it (restarts, CRDs installed, permissions granted).
func TestNothingLeftAfterStop(t *testing.T) {
	before := goleak.IgnoreCurrent()
	env, err := testenv.StartContext(timeout(t), testenv.Options{Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() }) // in case the test fails before Stop
	pids := processesIn(env.Dir())
	if len(pids) != 2 {
		t.Fatalf("found %d processes running in %s, want etcd and kube-apiserver: %v", len(pids), env.Dir(), pids)
	}
	// Restarting a process starts new goroutines of the same two kinds; installing
	// CRDs and granting permissions leave none (their connections are closed).
	if err := env.RestartAPIServer(timeout(t)); err != nil {
		t.Fatal(err)
	}
	pids = processesIn(env.Dir())
	if err := env.InstallCRDYAML(timeout(t), []byte(thingYAML)); err != nil {
		t.Fatal(err)
	}
	if err := env.Grant(timeout(t), "", testenv.User("dave"), rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get"}}); err != nil {
		t.Fatal(err)
	}

	ignoreOurs := []goleak.Option{before, goleak.IgnoreAnyFunction(testenv.SpawnerFunction), goleak.IgnoreAnyFunction(testenv.WaiterFunction)}
	if err := findLeaks(ignoreOurs...); err != nil {
		t.Errorf("while the environment runs, goroutines other than SpawnerFunction and WaiterFunction run: %v", err)
	}
	running := goleak.Find(before)
	if running == nil {
		t.Error("while the environment runs, goleak finds no goroutine of it: are SpawnerFunction and WaiterFunction ignoring nothing?")
	}
	for _, name := range []string{testenv.WaiterFunction, testenv.SpawnerFunction} {
		if runtime.GOOS != "linux" && name == testenv.SpawnerFunction {
			continue // only Linux needs a spawner
		}
		if running != nil && !strings.Contains(running.Error(), name) {
			t.Errorf("no running goroutine is named %s:\n%v", name, running)
		}
	}

	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if _, err := os.Stat(filepath.Join("/proc", pid)); err == nil {
			if cmdline, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline")); err == nil && strings.Contains(string(cmdline), env.Dir()) {
				t.Errorf("process %s is still there after Stop: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
			}
		}
	}
	if left := processesIn(env.Dir()); len(left) > 0 {
		t.Errorf("processes still running in %s after Stop: %v", env.Dir(), left)
	}
	if err := findLeaks(before); err != nil {
		t.Errorf("goroutines left after Stop: %v", err)
	}
}

// findLeaks is goleak.Find, retried for up to 30 seconds: goroutines on their way out
// (a waiter that has just closed its channel) do not count.
func findLeaks(opts ...goleak.Option) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processesIn returns the pids of the processes whose command line names dir (etcd's
// data directory and the apiserver's certificates are in it). It needs /proc.
func processesIn(dir string) []string { return processesWith(dir + "/") }

// processesWith returns the pids of the processes whose command line contains substr.
func processesWith(substr string) []string {
	var pids []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range cmdlines {
		cmdline, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(cmdline), substr) {
			pids = append(pids, filepath.Base(filepath.Dir(path)))
		}
	}
	return pids
}

// childrenOf returns those of pids whose parent is ppid.
func childrenOf(ppid int, pids []string) []string {
	var out []string
	for _, pid := range pids {
		stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command name, which is in parentheses and may hold spaces:
		// state, then the parent's pid.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// TestMissingBinaries: Start fails with an error that matches ErrNoBinaries, names
// the directory and where its name came from, and gives the one command that builds
// the binaries there; it starts nothing.
func TestMissingBinaries(t *testing.T) {
	empty := t.TempDir()
	_, err := testenv.StartContext(timeout(t), testenv.Options{BinDir: empty})
	if !errors.Is(err, testenv.ErrNoBinaries) {
		t.Fatalf("Start with an empty BinDir: got %v, want ErrNoBinaries", err)
	}
	for _, want := range []string{"etcd is missing in " + empty, "Options.BinDir", "`" + testenv.SetupCommand + " -o " + empty + "`", "etcd v3.6.6 and kube-apiserver v1.36.3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	t.Log(err)

	t.Setenv(testenv.EnvBinDir, empty)
	if err := os.WriteFile(filepath.Join(empty, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = testenv.StartContext(timeout(t), testenv.Options{})
	if !errors.Is(err, testenv.ErrNoBinaries) || !strings.Contains(err.Error(), "kube-apiserver is missing in "+empty+" ($"+testenv.EnvBinDir+")") {
		t.Fatalf("Start with $%s naming a directory without kube-apiserver: got %v, want ErrNoBinaries naming kube-apiserver, the directory and the variable", testenv.EnvBinDir, err)
	}

	// A test that calls Start fails (with that error) rather than skipping.
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		testenv.Start(ft, testenv.Options{BinDir: empty})
	}()
	if !ft.fatal || !strings.Contains(ft.msg, testenv.SetupCommand) {
		t.Errorf("Start(t) without binaries: fatal=%v %q, want t.Fatal with the setup command", ft.fatal, ft.msg)
	}
}

// fatalRecorder records Fatal instead of failing the test.
type fatalRecorder struct {
	testing.TB
	fatal bool
	msg   string
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.fatal, f.msg = true, fmt.Sprint(args...)
	panic("fatal") // stands in for runtime.Goexit
}

func (f *fatalRecorder) Helper() {}

// TestStartFailureLeavesNothing: when the apiserver cannot start, Start returns its
// log's last lines, and leaves neither the directory nor etcd behind.
func TestStartFailureLeavesNothing(t *testing.T) {
	// An unknown flag makes kube-apiserver exit at once, after etcd started.
	_, err := testenv.StartContext(timeout(t), testenv.Options{
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
	dir := regexp.MustCompile(`/\S*typedinformer-testenv-\d+`).FindString(err.Error())
	if dir == "" {
		t.Fatal("the error does not name the directory")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start left %s behind: %v", dir, err)
	}
	if left := processesIn(dir); len(left) > 0 {
		t.Errorf("processes still running in %s: %v", dir, left)
	}
}

// ---------------------------------------------------------------------------------------
// CRDs

var (
	widgets = schema.GroupVersionResource{Group: "testenv.example.com", Version: "v1", Resource: "widgets"}
	gadgets = schema.GroupVersionResource{Group: "testenv.example.com", Version: "v1", Resource: "gadgets"}
	gizmos  = schema.GroupVersionResource{Group: "testenv.example.com", Version: "v1alpha1", Resource: "gizmos"}
	things  = schema.GroupVersionResource{Group: "yaml.example.com", Version: "v1", Resource: "things"}
)

// widgetCRD is a CRD as a Go value.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.testenv.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "testenv.example.com",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"color": {Type: "string"}}},
					},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
}

const thingYAML = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.yaml.example.com
spec:
  group: yaml.example.com
  scope: Namespaced
  names: {plural: things, singular: thing, kind: Thing}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// TestCRDs: CRDs from Go values, YAML bytes and files are usable as soon as the
// install returns (the next request creates and lists custom objects); a CRD the
// server rejects, or whose names clash, is an error that names it.
func TestCRDs(t *testing.T) {
	crd := widgetCRD()
	env := testenv.Start(t, testenv.Options{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}, CRDPaths: []string{"testdata/crds"}})
	dyn := newDynamic(t, env.AdminConfig())

	t.Run("from Options: a Go value and a directory of YAML files", func(t *testing.T) {
		if crd.ResourceVersion != "" || len(crd.Status.Conditions) != 0 {
			t.Errorf("Start modified the CRD value: resourceVersion %q, conditions %v", crd.ResourceVersion, crd.Status.Conditions)
		}
		createAndList(t, dyn, widgets, "Widget", namespace)
		createAndList(t, dyn, gadgets, "Gadget", namespace)
		createAndList(t, dyn, gizmos, "Gizmo", "") // cluster-scoped, an older served version
	})

	t.Run("from YAML bytes", func(t *testing.T) {
		if err := env.InstallCRDYAML(timeout(t), []byte(thingYAML)); err != nil {
			t.Fatal(err)
		}
		createAndList(t, dyn, things, "Thing", namespace)
	})

	t.Run("installing again replaces the spec", func(t *testing.T) {
		changed := widgetCRD()
		changed.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["size"] = apiextensionsv1.JSONSchemaProps{Type: "integer"}
		changed.Spec.Versions = append(changed.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: "v2", Served: true, Storage: false,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)}},
		})
		if err := env.InstallCRDs(timeout(t), changed); err != nil {
			t.Fatal(err)
		}
		// The new version is served as soon as InstallCRDs returns.
		createAndList(t, dyn, schema.GroupVersionResource{Group: widgets.Group, Version: "v2", Resource: "widgets"}, "Widget", namespace)
	})

	t.Run("a CRD the server rejects", func(t *testing.T) {
		bad := widgetCRD()
		bad.Name = "wrong-name.testenv.example.com" // must be <plural>.<group>
		err := env.InstallCRDs(timeout(t), bad)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "installing CRD wrong-name.testenv.example.com") {
			t.Fatalf("installing an invalid CRD: got %v, want an Invalid error naming it", err)
		}
		t.Log(err)
	})

	t.Run("names that clash", func(t *testing.T) {
		clash := widgetCRD()
		clash.Name = "sprockets.testenv.example.com"
		clash.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "sprockets", Kind: "Widget", ListKind: "WidgetList"}
		err := env.InstallCRDs(timeout(t), clash)
		if err == nil || !strings.Contains(err.Error(), "installing CRD sprockets.testenv.example.com: its names are not accepted") {
			t.Fatalf("installing a CRD whose kind is taken: got %v, want an error saying its names are not accepted", err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the clash was reported by a timeout, not as soon as the server said so: %v", err)
		}
		t.Log(err)
	})

	t.Run("bad input is an error and installs nothing", func(t *testing.T) {
		if err := env.InstallCRDs(timeout(t), nil); err == nil {
			t.Error("InstallCRDs(nil): no error")
		}
		if err := env.InstallCRDYAML(timeout(t), []byte("kind: [")); err == nil {
			t.Error("InstallCRDYAML of broken YAML: no error")
		}
		if err := env.InstallCRDFiles(timeout(t), "testdata/no-such-file.yaml"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("InstallCRDFiles of a missing file: got %v, want ErrNotExist", err)
		}
	})

	t.Run("a CRD the server rejects fails Start, which leaves nothing", func(t *testing.T) {
		bad := widgetCRD()
		bad.Spec.Versions[0].Storage = false // one version must be the storage version
		_, err := testenv.StartContext(timeout(t), testenv.Options{
			Logger: ktesting.NewLogger(t, ktesting.NewConfig()),
			CRDs:   []*apiextensionsv1.CustomResourceDefinition{bad},
		})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "installing CRD widgets.testenv.example.com") {
			t.Fatalf("Start with an invalid CRD: got %v, want an Invalid error naming it", err)
		}
		// Every environment's processes have its directory in their command line. Other
		// test binaries (make test runs packages at once) have environments of their own:
		// only this binary's children count, and of those only env's may run.
		all := childrenOf(os.Getpid(), processesWith(filepath.Join(os.TempDir(), "typedinformer-testenv-")))
		ours := processesIn(env.Dir())
		for _, pid := range all {
			if !slices.Contains(ours, pid) {
				cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
				t.Errorf("process %s still running: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
			}
		}
	})

	t.Run("a bad CRD file fails Start before anything starts", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(path, []byte(thingYAML+"---\napiVersion: v1\nkind: ConfigMap\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := testenv.StartContext(timeout(t), testenv.Options{CRDPaths: []string{path}})
		if err == nil || !strings.Contains(err.Error(), path+", document 2 (from line 17) is a v1 ConfigMap, not a apiextensions.k8s.io/v1 CustomResourceDefinition") {
			t.Fatalf("Start with a ConfigMap in a CRD file: got %v", err)
		}
	})
}

// TestParseCRDs: each way a CRD document can be wrong is an error that says which
// document of which source, and how.
func TestParseCRDs(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       string // in the error; "" means no error
		crds       int
	}{
		{name: "one CRD", yaml: thingYAML, crds: 1},
		{name: "leading separator and comments", yaml: "# CRDs\n---\n" + thingYAML + "\n---\n# nothing\n--- # end\n", crds: 1},
		{name: "JSON", yaml: `{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "a.b.c"}}`, crds: 1},
		{name: "two", yaml: thingYAML + "---" + strings.ReplaceAll(thingYAML, "things", "others"), crds: 2},
		{name: "empty", yaml: "", want: "src holds no CustomResourceDefinition"},
		{name: "only comments", yaml: "# nothing\n---\n", want: "src holds no CustomResourceDefinition"},
		{name: "broken YAML", yaml: thingYAML + "---\nkind: [\n", want: "src, document 2 (from line 17) does not parse"},
		{name: "a list, not an object", yaml: "- a\n- b\n", want: "src, document 1 (from line 1) is not an object"},
		{name: "another kind", yaml: "apiVersion: v1\nkind: ConfigMap\n", want: "src, document 1 (from line 1) is a v1 ConfigMap, not a apiextensions.k8s.io/v1 CustomResourceDefinition"},
		{name: "an old version", yaml: "apiVersion: apiextensions.k8s.io/v1beta1\nkind: CustomResourceDefinition\n", want: "is a apiextensions.k8s.io/v1beta1 CustomResourceDefinition, not a apiextensions.k8s.io/v1"},
		{name: "no type", yaml: "metadata: {name: x}\n", want: "is a document with neither apiVersion nor kind"},
		{name: "a misspelt field", yaml: strings.Replace(thingYAML, "openAPIV3Schema", "openAPIv3Schema", 1), want: `src, document 1 (from line 1) is not a valid CustomResourceDefinition: unknown field "spec.versions[0].schema.openAPIv3Schema"`},
		{name: "a misspelt field in a schema", yaml: strings.Replace(thingYAML, "x-kubernetes-preserve-unknown-fields", "x-kubernetes-preserve-unknown-field", 1), want: `unknown field "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-preserve-unknown-field"`},
		{name: "a field twice", yaml: thingYAML + "  scope: Cluster\n", want: "src, document 1 (from line 1) does not parse: yaml: unmarshal errors:\n  line 16: key \"scope\" already set in map"},
		{name: "no name", yaml: strings.Replace(thingYAML, "name: things.yaml.example.com", "labels: {a: b}", 1), want: "the CustomResourceDefinition has no metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crds, err := testenv.ParseCRDs([]byte(tc.yaml), "src")
			if tc.want == "" {
				if err != nil || len(crds) != tc.crds {
					t.Fatalf("got %d CRDs and error %v, want %d CRDs", len(crds), err, tc.crds)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestReadCRDFiles: a directory stands for its .yaml, .yml and .json files; a path that
// holds none is an error.
func TestReadCRDFiles(t *testing.T) {
	crds, err := testenv.ReadCRDFiles("testdata/crds")
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 2 || crds[0].Name != "gadgets.testenv.example.com" || crds[1].Name != "gizmos.testenv.example.com" {
		t.Errorf("ReadCRDFiles(testdata/crds) = %v, want gadgets and gizmos", names(crds))
	}
	if _, err := testenv.ReadCRDFiles(t.TempDir()); err == nil || !strings.Contains(err.Error(), "has no .yaml, .yml or .json file") {
		t.Errorf("ReadCRDFiles of an empty directory: got %v", err)
	}
	if _, err := testenv.ReadCRDFiles("testdata/crds/README.txt"); err == nil || !strings.Contains(err.Error(), "testdata/crds/README.txt, document 1 (from line 1) does not parse") {
		t.Errorf("ReadCRDFiles of a text file: got %v", err)
	}
}

func names(crds []*apiextensionsv1.CustomResourceDefinition) []string {
	var out []string
	for _, c := range crds {
		out = append(out, c.Name)
	}
	return out
}

// createAndList creates an object of gvr and lists it back.
func createAndList(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, kind, ns string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       kind,
		"metadata":   map[string]any{"generateName": "test-"},
	}}
	var client dynamic.ResourceInterface = dyn.Resource(gvr)
	if ns != "" {
		client = dyn.Resource(gvr).Namespace(ns)
	}
	created, err := client.Create(timeout(t), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a %s right after the install: %v", gvr, err)
	}
	list, err := client.List(timeout(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing %s: %v", gvr, err)
	}
	for _, item := range list.Items {
		if item.GetName() == created.GetName() {
			return
		}
	}
	t.Fatalf("the list of %s lacks %s", gvr, created.GetName())
}

func ptr[T any](v T) *T { return &v }

// ---------------------------------------------------------------------------------------
// RBAC

// TestGrant: a restricted user is forbidden until Grant returns, and then allowed
// exactly what it was granted, where it was granted.
func TestGrant(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env.AdminConfig())
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.CoreV1().Namespaces().Create(timeout(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bob := newClient(t, env.UserConfig("bob", "readers"))
	readConfigMaps := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}

	t.Run("in a namespace, for a user", func(t *testing.T) {
		if _, err := bob.CoreV1().ConfigMaps("team-a").List(timeout(t), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("before Grant: got %v, want Forbidden", err)
		}
		if err := env.Grant(timeout(t), "team-a", testenv.User("bob"), readConfigMaps); err != nil {
			t.Fatal(err)
		}
		// No retry: the permission applies as soon as Grant returns.
		if _, err := bob.CoreV1().ConfigMaps("team-a").List(timeout(t), metav1.ListOptions{}); err != nil {
			t.Fatalf("after Grant: %v", err)
		}
		if _, err := bob.CoreV1().ConfigMaps("team-b").List(timeout(t), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("in another namespace: got %v, want Forbidden", err)
		}
		if _, err := bob.CoreV1().ConfigMaps("team-a").Create(timeout(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("a verb not granted: got %v, want Forbidden", err)
		}
	})

	t.Run("cluster-wide, for a group, with a subresource and a resource name", func(t *testing.T) {
		rules := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces/status"}, ResourceNames: []string{"team-b"}, Verbs: []string{"get"}},
			{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
		}
		if err := env.Grant(timeout(t), "", testenv.Group("readers"), rules...); err != nil {
			t.Fatal(err)
		}
		if _, err := bob.CoreV1().Namespaces().List(timeout(t), metav1.ListOptions{}); err != nil {
			t.Errorf("listing namespaces after a cluster-wide Grant to bob's group: %v", err)
		}
		if err := bob.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/team-b/status").Do(timeout(t)).Error(); err != nil {
			t.Errorf("getting a granted subresource: %v", err)
		}
		if err := bob.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/team-a/status").Do(timeout(t)).Error(); !apierrors.IsForbidden(err) {
			t.Errorf("getting the subresource of another name: got %v, want Forbidden", err)
		}
	})

	t.Run("roles and bindings are labelled", func(t *testing.T) {
		roles, err := admin.RbacV1().Roles("team-a").List(timeout(t), metav1.ListOptions{LabelSelector: testenv.ManagedByLabel + "=typedinformer-testenv"})
		if err != nil || len(roles.Items) != 1 || !strings.HasPrefix(roles.Items[0].Name, "testenv-grant-") {
			t.Errorf("labelled Roles in team-a: %v, %v", roles, err)
		}
	})

	t.Run("bad input is an error and grants nothing", func(t *testing.T) {
		if err := env.Grant(timeout(t), "team-a", testenv.User("bob")); err == nil || !strings.Contains(err.Error(), "no rules") {
			t.Errorf("Grant without rules: got %v", err)
		}
		if err := env.Grant(timeout(t), "team-a", rbacv1.Subject{Kind: "Robot", Name: "r2"}, readConfigMaps); err == nil || !strings.Contains(err.Error(), "the kind must be User, Group or ServiceAccount") {
			t.Errorf("Grant to an unknown kind of subject: got %v", err)
		}
		bad := rbacv1.PolicyRule{Resources: []string{"configmaps"}, Verbs: []string{"get"}} // no API group
		if err := env.Grant(timeout(t), "team-a", testenv.User("carol"), bad); !apierrors.IsInvalid(err) {
			t.Errorf("Grant of a rule without API groups: got %v, want the server's Invalid error", err)
		}
	})
}

// ---------------------------------------------------------------------------------------
// Helpers

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

// ownConnections gives config connections of its own, closed when the test ends, so
// that no connection's goroutine outlives the test.
func ownConnections(t *testing.T, config *rest.Config) *rest.Config {
	config = rest.CopyConfig(config)
	d := connrotation.NewDialer((&net.Dialer{Timeout: 10 * time.Second}).DialContext)
	config.Dial = d.DialContext
	t.Cleanup(d.CloseAll)
	return config
}

func newClient(t *testing.T, config *rest.Config) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(ownConnections(t, config))
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func newDynamic(t *testing.T, config *rest.Config) dynamic.Interface {
	t.Helper()
	client, err := dynamic.NewForConfig(ownConnections(t, config))
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
