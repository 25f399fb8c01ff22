//go:build unix

package testenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/typedinformer/typedinformer/typed/testenv/internal/binaries"
)

// outsideGoMod is the go.mod of a module outside this repository that uses typedinformer
// through a replace directive, as it would use a released version.
const outsideGoMod = `module example.com/outside

go 1.26.0

require github.com/typedinformer/typedinformer v0.0.0-00010101000000-000000000000

replace github.com/typedinformer/typedinformer => %s
`

// outsideTest is the test that module writes: the package doc's recipe.
const outsideTest = `package outside

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/typedinformer/typedinformer/typed/testenv"
)

func TestOutside(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDPaths: []string{"testdata/crds.yaml"}})
	client := dynamic.NewForConfigOrDie(env.AdminConfig())
	sites := client.Resource(schema.GroupVersionResource{Group: "outside.example.com", Version: "v1", Resource: "sites"}).Namespace("default")

	site := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "outside.example.com/v1", "kind": "Site",
		"metadata": map[string]any{"name": "home"}, "spec": map[string]any{"url": "https://example.com"},
	}}
	if _, err := sites.Create(t.Context(), site, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := sites.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].GetName() != "home" {
		t.Fatalf("listed %v, want the site home", list.Items)
	}
	t.Logf("listed site %s from %s", list.Items[0].GetName(), env.AdminConfig().Host)
}
`

const outsideCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: sites.outside.example.com
spec:
  group: outside.example.com
  scope: Namespaced
  names: {plural: sites, singular: site, kind: Site}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              url: {type: string}
`

// TestOutsideModule proves the package works from a module outside this repository:
// it writes a module that requires typedinformer (through a replace directive pointing
// at this checkout) and a test that starts an environment, installs a CRD from a YAML
// file and lists a custom object, and runs `go test` there with -mod=mod and this
// process's environment (GOPROXY, GOFLAGS, the Go caches), so that everything resolves
// through the module proxy or the replace. It also runs the setup command there, when
// the binaries are already built and stamped (it then only checks them; a real build
// takes minutes), and checks that without binaries the outside test fails with the
// command that builds them.
//
// It takes about 20 seconds on 2 cores with warm Go caches (building and linking the
// outside test dominates; with cold caches, compiling client-go adds a few minutes), so
// -short skips it; `make test` runs it, once: it lives in this package only.
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the test that builds and runs a test in a module outside the repository")
	}
	started := time.Now()
	binDir, err := FindBinaries("")
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	repo, err := findModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	module := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":             strings.Replace(outsideGoMod, "%s", repo, 1),
		"outside_test.go":    outsideTest,
		"testdata/crds.yaml": outsideCRD,
	} {
		path := filepath.Join(module, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	goFlags := strings.TrimSpace(os.Getenv("GOFLAGS") + " -mod=mod")
	run := func(t *testing.T, binDirEnv string, args ...string) (stdout, stderr string, err error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...) // go test puts its own go first in $PATH
		cmd.Dir = module
		cmd.Env = append(os.Environ(), "GOFLAGS="+goFlags, "GOWORK=off", EnvBinDir+"="+binDirEnv)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		began := time.Now()
		err = cmd.Run()
		t.Logf("go %s: %v in %v", strings.Join(args, " "), err, time.Since(began).Round(time.Millisecond))
		return out.String(), errOut.String(), err
	}

	t.Run("the setup command runs from the module", func(t *testing.T) {
		for _, tool := range binaries.Tools {
			if !tool.Cached(binDir) {
				t.Skipf("%s in %s has no matching stamp: the setup command would build it, which takes minutes", tool.Name, binDir)
			}
		}
		args := append(strings.Fields(strings.TrimPrefix(SetupCommand, "go ")), "-o", binDir)
		stdout, stderr, err := run(t, "", args...)
		if err != nil {
			t.Fatalf("%s -o %s: %v\n%s", SetupCommand, binDir, err, stderr)
		}
		if got := strings.TrimSpace(stdout); got != binDir {
			t.Errorf("the setup command printed %q, want the directory %s", got, binDir)
		}
		for _, tool := range binaries.Tools {
			if !strings.Contains(stderr, tool.Name+" "+tool.Version()+" is cached in "+binDir) {
				t.Errorf("the setup command did not find %s cached:\n%s", tool.Name, stderr)
			}
		}
	})

	testArgs := []string{"test", "-count=1", "-v"}
	if raceEnabled {
		testArgs = append(testArgs, "-race") // reuses what this test binary's build compiled
	}
	t.Run("a test starts the environment, installs a CRD and lists", func(t *testing.T) {
		stdout, stderr, err := run(t, binDir, append(testArgs, "./...")...)
		if err != nil || !strings.Contains(stdout, "--- PASS: TestOutside") {
			t.Fatalf("go test in the outside module: %v\n%s\n%s", err, stdout, stderr)
		}
		t.Logf("%s", grepLines(stdout, "listed site", "--- PASS", "ok "))
	})

	t.Run("without binaries the test fails with the command that builds them", func(t *testing.T) {
		empty := t.TempDir()
		stdout, stderr, err := run(t, empty, append(testArgs, "./...")...)
		want := "build etcd v3.6.6 and kube-apiserver v1.36.3 there with `" + SetupCommand + " -o " + empty + "`"
		if err == nil || !strings.Contains(stdout, want) {
			t.Fatalf("go test in the outside module without binaries: %v, want a failure with %q\n%s\n%s", err, want, stdout, stderr)
		}
		t.Logf("%s", grepLines(stdout, "etcd is missing"))
	})
	t.Logf("TestOutsideModule took %v", time.Since(started).Round(time.Second))
}

// grepLines returns the lines of s that contain any of subs.
func grepLines(s string, subs ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				out = append(out, strings.TrimSpace(line))
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
