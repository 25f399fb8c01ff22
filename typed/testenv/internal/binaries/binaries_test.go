package binaries

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// toolsDir is internal/tools at the root of the repository, as seen from this package.
const toolsDir = "../../../../internal/tools"

// TestPinsMatchTheToolModules: the embedded go.mod and go.sum are byte-for-byte copies
// of the tool modules', so that the setup command builds what `make controlplane`
// builds. Run `go generate ./typed/testenv/internal/binaries` after changing a tool
// module.
func TestPinsMatchTheToolModules(t *testing.T) {
	for _, tool := range Tools {
		for _, f := range []struct {
			name     string
			embedded []byte
		}{{"go.mod", tool.GoMod()}, {"go.sum", tool.GoSum()}} {
			path := filepath.Join(toolsDir, tool.Name, f.name)
			original, err := os.ReadFile(path)
			if errors.Is(err, os.ErrNotExist) {
				t.Skipf("%s is not here (not a checkout of the repository)", path)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(original, f.embedded) {
				t.Errorf("the embedded copy of %s differs: run `go generate ./typed/testenv/internal/binaries`", path)
			}
		}
	}
}

// TestStampIsBuildShs: the stamp is what `sha256sum go.mod go.sum | sha256sum | cut
// -c1-16` prints in the tool module, so binaries built before the setup command existed
// count as cached.
func TestStampIsBuildShs(t *testing.T) {
	for _, tool := range Tools {
		dir := filepath.Join(toolsDir, tool.Name)
		if _, err := os.Stat(dir); err != nil {
			t.Skipf("%s is not here: %v", dir, err)
		}
		cmd := exec.Command("bash", "-c", "sha256sum go.mod go.sum | sha256sum | cut -c1-16")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("no sha256sum: %v", err)
		}
		if got, want := tool.Stamp(), strings.TrimSpace(string(out)); got != want {
			t.Errorf("%s: Stamp() = %s, sha256sum says %s", tool.Name, got, want)
		}
	}
}

func TestVersions(t *testing.T) {
	semver := regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	for _, tool := range Tools {
		if v := tool.Version(); !semver.MatchString(v) {
			t.Errorf("%s: Version() = %q, want a release version of %s", tool.Name, v, tool.Module)
		}
	}
	if got := Describe(); !strings.HasPrefix(got, "etcd v3.") || !strings.Contains(got, " and kube-apiserver v1.") {
		t.Errorf("Describe() = %q", got)
	}
}

// fakeGo writes a go command that records its arguments, its directory and the go.mod
// it sees, then writes a binary to the -o path (or fails if $FAKE_GO_FAIL is set).
func fakeGo(t *testing.T) (path, record string) {
	t.Helper()
	dir := t.TempDir()
	record = filepath.Join(dir, "record")
	path = filepath.Join(dir, "go")
	script := `#!/bin/sh
if [ -n "$FAKE_GO_FAIL" ]; then echo "cannot find module: $FAKE_GO_FAIL" >&2; exit 1; fi
{ echo "args: $*"; echo "gowork: $GOWORK"; sha256sum go.mod go.sum | sha256sum | cut -c1-16; } >>` + record + `
out=; while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out=$2; fi; shift; done
printf '#!/bin/sh\n' >"$out"; chmod +x "$out"
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, record
}

// TestBuild: Build builds each missing tool with `go build -trimpath` in a module made
// of the pins, stamps it, and leaves cached tools alone.
func TestBuild(t *testing.T) {
	goCmd, record := fakeGo(t)
	dir := filepath.Join(t.TempDir(), "new", "bin")
	var progress bytes.Buffer
	if err := Build(context.Background(), dir, BuildOptions{Go: goCmd, Progress: &progress}); err != nil {
		t.Fatal(err)
	}
	rec, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range Tools {
		if !tool.Cached(dir) {
			t.Errorf("%s is not cached after Build", tool.Name)
		}
		if !strings.Contains(string(rec), "-trimpath -o "+filepath.Join(dir, tool.Name+".tmp-")) ||
			!strings.Contains(string(rec), " "+tool.Package+"\n") {
			t.Errorf("%s was not built with go build -trimpath -o DIR/NAME.tmp-PID %s:\n%s", tool.Name, tool.Package, rec)
		}
		// The temporary module holds the pins: the stamp computed there is the tool's.
		if !strings.Contains(string(rec), "\n"+tool.Stamp()+"\n") {
			t.Errorf("%s was not built in a module made of its pins:\n%s", tool.Name, rec)
		}
	}
	if !strings.Contains(string(rec), "gowork: off") {
		t.Errorf("the build does not turn workspaces off:\n%s", rec)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(leftovers) > 0 {
		t.Errorf("Build left %v behind", leftovers)
	}
	t.Logf("progress:\n%s", progress.String())

	// A second Build finds both cached and runs nothing.
	progress.Reset()
	if err := os.Remove(record); err != nil {
		t.Fatal(err)
	}
	if err := Build(context.Background(), dir, BuildOptions{Go: goCmd, Progress: &progress}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(record); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the second Build ran go although both binaries are cached")
	}
	if got := strings.Count(progress.String(), "is cached in "+dir); got != 2 {
		t.Errorf("the second Build reported %d cached binaries, want 2:\n%s", got, progress.String())
	}

	// A stale stamp (the pins changed) means a rebuild of that tool only.
	if err := os.WriteFile(filepath.Join(dir, "etcd.stamp"), []byte("0000000000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if Tools[0].Cached(dir) {
		t.Fatal("etcd with a stale stamp counts as cached")
	}
	if err := Build(context.Background(), dir, BuildOptions{Go: goCmd}); err != nil {
		t.Fatal(err)
	}
	rec, _ = os.ReadFile(record)
	if got := strings.Count(string(rec), "args: "); got != 1 || !strings.Contains(string(rec), Tools[0].Package) {
		t.Errorf("after etcd's stamp went stale, Build ran go %d times, want once for etcd:\n%s", got, rec)
	}
}

// TestBuildFailure: a failing build is an error that names the tool, the command and
// what go printed, and leaves no binary or stamp.
func TestBuildFailure(t *testing.T) {
	goCmd, _ := fakeGo(t)
	t.Setenv("FAKE_GO_FAIL", "go.etcd.io/etcd/server/v3")
	dir := t.TempDir()
	err := Build(context.Background(), dir, BuildOptions{Go: goCmd})
	if err == nil {
		t.Fatal("Build with a failing go: no error")
	}
	for _, want := range []string{"building etcd v3.", "build -trimpath", "cannot find module: go.etcd.io/etcd/server/v3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("a failed Build left %v in %s", entries, dir)
	}
}

// TestHeartbeat: a long build says it is still running.
func TestHeartbeat(t *testing.T) {
	dir := t.TempDir()
	goCmd := filepath.Join(dir, "go")
	// Blocks until the test has seen a heartbeat, then fails.
	gate := filepath.Join(dir, "gate")
	script := "#!/bin/sh\nwhile [ ! -e " + gate + " ]; do sleep 0.01; done\nexit 1\n"
	if err := os.WriteFile(goCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	progress := &syncBuffer{seen: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- Build(context.Background(), filepath.Join(dir, "bin"), BuildOptions{Go: goCmd, Progress: progress, Heartbeat: time.Millisecond})
	}()
	select {
	case <-progress.seen:
	case <-time.After(time.Minute):
		t.Error("no heartbeat within a minute")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("Build with a failing go: no error")
	}
}

// syncBuffer closes seen at the first "still building" line.
type syncBuffer struct {
	seen   chan struct{}
	closed bool
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	if !b.closed && strings.Contains(string(p), "still building etcd") {
		b.closed = true
		close(b.seen)
	}
	return len(p), nil
}
