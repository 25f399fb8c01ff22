//go:build unix

package controlplane

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvBinDir is the environment variable that names the directory holding the
// etcd and kube-apiserver binaries when [Options.BinDir] is empty.
const EnvBinDir = "TYPEDINFORMER_CONTROLPLANE_BIN"

// rootModule is the module whose root holds .cache/bin.
const rootModule = "github.com/typedinformer/typedinformer"

const (
	etcdBinary      = "etcd"
	apiServerBinary = "kube-apiserver"
)

// findBinDir returns the directory holding etcd and kube-apiserver: explicit
// if not empty, else $TYPEDINFORMER_CONTROLPLANE_BIN, else .cache/bin in the
// root of the module found by walking up from the working directory. It checks
// that both binaries are there and executable.
func findBinDir(explicit string) (string, error) {
	dir, source := explicit, "Options.BinDir"
	if dir == "" {
		dir, source = os.Getenv(EnvBinDir), "$"+EnvBinDir
	}
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("controlplane: finding the binaries: %w", err)
		}
		root, err := findModuleRoot(wd)
		if err != nil {
			return "", fmt.Errorf("controlplane: cannot find etcd and kube-apiserver: set Options.BinDir or $%s, or run inside the %s module after `make controlplane`: %w",
				EnvBinDir, rootModule, err)
		}
		dir, source = filepath.Join(root, ".cache", "bin"), "the module's .cache/bin"
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("controlplane: binary directory %q: %w", dir, err)
	}
	for _, name := range []string{etcdBinary, apiServerBinary} {
		path := filepath.Join(abs, name)
		fi, err := os.Stat(path)
		switch {
		case err != nil && errors.Is(err, os.ErrNotExist):
			return "", fmt.Errorf("controlplane: %s is missing from %s (from %s): run `make controlplane` to build etcd and kube-apiserver", name, abs, source)
		case err != nil:
			return "", fmt.Errorf("controlplane: %s (from %s): %w; run `make controlplane` to build etcd and kube-apiserver", path, source, err)
		case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
			return "", fmt.Errorf("controlplane: %s (from %s) is not an executable file: run `make controlplane` to build etcd and kube-apiserver", path, source)
		}
	}
	return abs, nil
}

// findModuleRoot walks up from dir to the directory whose go.mod declares
// rootModule, skipping the go.mod files of other modules on the way.
func findModuleRoot(dir string) (string, error) {
	for d := filepath.Clean(dir); ; {
		if name, err := moduleName(filepath.Join(d, "go.mod")); err == nil && name == rootModule {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod of module %s in %s or any parent directory", rootModule, dir)
		}
		d = parent
	}
}

// moduleName returns the module path declared in the go.mod file at path.
func moduleName(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], "\"`"), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s has no module line", path)
}
