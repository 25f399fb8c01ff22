//go:build unix

package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/typedinformer/typedinformer/typed/testenv/internal/binaries"
)

// EnvBinDir is the environment variable that names the directory holding the
// etcd and kube-apiserver binaries when [Options.BinDir] is empty. The
// repository's Makefile sets it to its .cache/bin.
const EnvBinDir = "TYPEDINFORMER_CONTROLPLANE_BIN"

// SetupCommand is the command, run from a module that requires typedinformer,
// that builds etcd and kube-apiserver at the versions this package is tested
// with into [DefaultBinDir] (or, with -o DIR, into DIR) and prints the
// directory. The first build takes about 4 minutes on 2 cores; later runs find
// the binaries cached and return at once.
const SetupCommand = "go run github.com/typedinformer/typedinformer/typed/testenv/setup"

// The binaries' file names, as in binaries.Tools.
const (
	etcdBinary      = "etcd"
	apiServerBinary = "kube-apiserver"
)

// rootModule is the module whose checkout has .cache/bin, built by `make controlplane`.
const rootModule = "github.com/typedinformer/typedinformer"

// DefaultBinDir returns the directory [FindBinaries] looks in last, and where
// [SetupCommand] builds by default: typedinformer/testenv/bin in the user's
// cache directory ($XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches on
// macOS).
func DefaultBinDir() (string, error) {
	dir, err := binaries.DefaultDir()
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	return dir, nil
}

// FindBinaries returns the absolute path of the directory that holds the etcd
// and kube-apiserver binaries [StartContext] runs, given [Options.BinDir]. It
// looks, in this order:
//
//  1. in binDir, if it is not empty;
//  2. else in $TYPEDINFORMER_CONTROLPLANE_BIN ([EnvBinDir]), if it is set;
//  3. else in .cache/bin at the root of the typedinformer checkout that holds
//     the working directory, if there is one and it has both binaries (this is
//     where `make controlplane` builds them for the repository's own tests);
//  4. else in [DefaultBinDir], where [SetupCommand] builds them.
//
// The first directory named by 1 or 2 is the answer, whatever it holds: a
// configured directory is never second-guessed. If the chosen directory lacks
// an executable etcd or kube-apiserver, the error matches [ErrNoBinaries] and
// says exactly which command builds them there: `make controlplane` for a
// checkout's .cache/bin, else [SetupCommand] (with -o DIR for a directory other
// than the default).
func FindBinaries(binDir string) (string, error) {
	dir, source := binDir, "Options.BinDir"
	if dir == "" {
		dir, source = os.Getenv(EnvBinDir), "$"+EnvBinDir
	}
	checkout := checkoutBinDir()
	if dir == "" {
		def, err := DefaultBinDir()
		if err != nil {
			return "", err
		}
		dir, source = def, "the default directory"
		if checkout != "" && (missing(checkout) == "" || missing(def) != "") {
			dir, source = checkout, "the checkout's .cache/bin"
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("testenv: binary directory %q: %w", dir, err)
	}
	if name := missing(abs); name != "" {
		return "", fmt.Errorf("%w: %s in %s (%s): build %s there with `%s`",
			ErrNoBinaries, name, abs, source, binaries.Describe(), buildCommand(abs, checkout))
	}
	return abs, nil
}

// missing returns "" if dir holds executable etcd and kube-apiserver files, else
// what is wrong with the first that is missing or not executable.
func missing(dir string) string {
	for _, t := range binaries.Tools {
		path := filepath.Join(dir, t.Name)
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return t.Name + " is missing"
		case err != nil:
			return fmt.Sprintf("%s: %v", t.Name, err)
		case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
			return t.Name + " is not an executable file"
		}
	}
	return ""
}

// buildCommand returns the one command that builds the binaries into dir.
func buildCommand(dir, checkout string) string {
	if checkout != "" && dir == checkout {
		return "make controlplane"
	}
	if def, err := DefaultBinDir(); err == nil && dir == def {
		return SetupCommand
	}
	return SetupCommand + " -o " + shellQuote(dir)
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+=:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// checkoutBinDir returns .cache/bin at the root of the typedinformer checkout
// holding the working directory, or "" if there is none.
func checkoutBinDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	root, err := findModuleRoot(wd)
	if err != nil {
		return ""
	}
	return filepath.Join(root, ".cache", "bin")
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
