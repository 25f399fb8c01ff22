//go:build unix

package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindBinaries: the documented order (Options.BinDir, $TYPEDINFORMER_CONTROLPLANE_BIN,
// a checkout's .cache/bin, the default directory), and an error that gives the one
// command that builds the binaries where they were looked for.
func TestFindBinaries(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, "cache"))
	t.Setenv(EnvBinDir, "")
	def, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(home, "cache", "typedinformer", "testenv", "bin"); def != want {
		t.Fatalf("DefaultBinDir() = %s, want %s", def, want)
	}
	outside := t.TempDir()
	checkout := t.TempDir()
	writeFile(t, filepath.Join(checkout, "go.mod"), "module "+rootModule+"\n\ngo 1.26.0\n", 0o644)
	// A nested module of another name on the way up does not stop the walk.
	writeFile(t, filepath.Join(checkout, "internal", "tools", "go.mod"), "module example.com/tools\n", 0o644)
	inCheckout := filepath.Join(checkout, "internal", "tools", "pkg")
	if err := os.MkdirAll(inCheckout, 0o755); err != nil {
		t.Fatal(err)
	}
	checkoutBin := filepath.Join(checkout, ".cache", "bin")

	expectError := func(t *testing.T, binDir string, wants ...string) {
		t.Helper()
		_, err := FindBinaries(binDir)
		if !errors.Is(err, ErrNoBinaries) {
			t.Fatalf("FindBinaries(%q) = %v, want ErrNoBinaries", binDir, err)
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error lacks %q: %v", want, err)
			}
		}
	}
	expectDir := func(t *testing.T, binDir, want string) {
		t.Helper()
		got, err := FindBinaries(binDir)
		if err != nil || got != want {
			t.Fatalf("FindBinaries(%q) = %q, %v; want %s", binDir, got, err, want)
		}
	}

	t.Run("outside a checkout, nothing built: the setup command, as is", func(t *testing.T) {
		t.Chdir(outside)
		expectError(t, "", "etcd is missing in "+def+" (the default directory)", "with `"+SetupCommand+"`")
	})
	t.Run("in a checkout, nothing built: make controlplane", func(t *testing.T) {
		t.Chdir(inCheckout)
		expectError(t, "", "etcd is missing in "+checkoutBin+" (the checkout's .cache/bin)", "with `make controlplane`")
	})

	fakeBinaries(t, def)
	t.Run("outside a checkout: the default directory", func(t *testing.T) {
		t.Chdir(outside)
		expectDir(t, "", def)
	})
	t.Run("in a checkout without binaries: the default directory", func(t *testing.T) {
		t.Chdir(inCheckout)
		expectDir(t, "", def)
	})
	fakeBinaries(t, checkoutBin)
	t.Run("in a checkout with binaries: the checkout's", func(t *testing.T) {
		t.Chdir(inCheckout)
		expectDir(t, "", checkoutBin)
	})

	elsewhere := filepath.Join(t.TempDir(), "my bin")
	t.Run("the variable wins over the checkout and is not second-guessed", func(t *testing.T) {
		t.Chdir(inCheckout)
		t.Setenv(EnvBinDir, elsewhere)
		expectError(t, "", "etcd is missing in "+elsewhere+" ($"+EnvBinDir+")", "with `"+SetupCommand+" -o '"+elsewhere+"'`")
		t.Setenv(EnvBinDir, checkoutBin)
		expectDir(t, "", checkoutBin)
	})
	t.Run("Options.BinDir wins over the variable; relative is made absolute", func(t *testing.T) {
		t.Chdir(checkout)
		t.Setenv(EnvBinDir, def)
		expectDir(t, ".cache/bin", checkoutBin)
		expectError(t, "no-such-dir", "etcd is missing in "+filepath.Join(checkout, "no-such-dir")+" (Options.BinDir)")
	})
	t.Run("a binary that is not executable", func(t *testing.T) {
		fakeBinaries(t, elsewhere)
		if err := os.Chmod(filepath.Join(elsewhere, apiServerBinary), 0o644); err != nil {
			t.Fatal(err)
		}
		expectError(t, elsewhere, "kube-apiserver is not an executable file in "+elsewhere)
	})
}

func fakeBinaries(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{etcdBinary, apiServerBinary} {
		writeFile(t, filepath.Join(dir, name), "#!/bin/sh\n", 0o755)
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}
