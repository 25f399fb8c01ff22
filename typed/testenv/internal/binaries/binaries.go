// Package binaries knows where the test environment's etcd and kube-apiserver come
// from: the versions they are built at, the default directory they are cached in, and
// how to build them. It uses only the standard library, so that the setup command that
// builds them compiles in seconds in any module that requires typedinformer.
//
// The versions are pinned by the go.mod and go.sum of the tool modules in
// internal/tools/etcd and internal/tools/kube-apiserver at the root of the repository.
// Those modules are nested, so they are not part of the typedinformer module a user
// downloads; this package therefore embeds copies of their go.mod and go.sum (in pins/,
// renamed, since a file named go.mod would make pins/ a module of its own). `go generate`
// refreshes the copies, and a test fails when they differ from the originals.
//
// A binary is cached when it is executable and the stamp file next to it (NAME.stamp)
// holds the tool's stamp: the first 16 hex digits of the SHA-256 of what
// `sha256sum go.mod go.sum` prints for its tool module, as internal/tools/build.sh wrote
// it before this package existed. A change of the pins changes the stamp, and the next
// build replaces the binary.
package binaries

//go:generate cp ../../../../internal/tools/etcd/go.mod pins/etcd.mod
//go:generate cp ../../../../internal/tools/etcd/go.sum pins/etcd.sum
//go:generate cp ../../../../internal/tools/kube-apiserver/go.mod pins/kube-apiserver.mod
//go:generate cp ../../../../internal/tools/kube-apiserver/go.sum pins/kube-apiserver.sum

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

//go:embed pins
var pins embed.FS

// Tool is one binary of the test environment and the Go module that pins its version.
type Tool struct {
	// Name is the binary's file name: etcd or kube-apiserver.
	Name string
	// Module is the Go module whose version Version is, and Package the main package
	// built from it.
	Module, Package string
}

// Tools are the two binaries, in the order they are built.
var Tools = []Tool{
	{Name: "etcd", Module: "go.etcd.io/etcd/server/v3", Package: "go.etcd.io/etcd/server/v3"},
	{Name: "kube-apiserver", Module: "k8s.io/kubernetes", Package: "k8s.io/kubernetes/cmd/kube-apiserver"},
}

// GoMod returns the tool module's go.mod.
func (t Tool) GoMod() []byte { return mustRead("pins/" + t.Name + ".mod") }

// GoSum returns the tool module's go.sum.
func (t Tool) GoSum() []byte { return mustRead("pins/" + t.Name + ".sum") }

func mustRead(name string) []byte {
	data, err := pins.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return data
}

// Version returns the version of t.Module that the pinned go.mod requires, such as
// v3.6.6, or "" if it requires none (which a test rules out).
func (t Tool) Version() string {
	for _, line := range strings.Split(string(t.GoMod()), "\n") {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(fields) >= 2 && fields[0] == t.Module {
			return fields[1]
		}
	}
	return ""
}

// Stamp returns the tool's stamp (see the package doc).
func (t Tool) Stamp() string {
	var listing strings.Builder
	for _, f := range []struct {
		name string
		data []byte
	}{{"go.mod", t.GoMod()}, {"go.sum", t.GoSum()}} {
		sum := sha256.Sum256(f.data)
		fmt.Fprintf(&listing, "%s  %s\n", hex.EncodeToString(sum[:]), f.name)
	}
	sum := sha256.Sum256([]byte(listing.String()))
	return hex.EncodeToString(sum[:])[:16]
}

// Cached reports whether dir holds an executable t.Name whose stamp file matches t.
func (t Tool) Cached(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, t.Name))
	if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return false
	}
	stamp, err := os.ReadFile(filepath.Join(dir, t.Name+".stamp"))
	return err == nil && strings.TrimSpace(string(stamp)) == t.Stamp()
}

// Describe returns "etcd v3.6.6 and kube-apiserver v1.36.3".
func Describe() string {
	parts := make([]string, len(Tools))
	for i, t := range Tools {
		parts[i] = t.Name + " " + t.Version()
	}
	return strings.Join(parts, " and ")
}

// DefaultDir returns the directory the binaries are cached in when nothing else is
// configured: typedinformer/testenv/bin in the user's cache directory
// ($XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches on macOS).
func DefaultDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user's cache directory: %w", err)
	}
	return filepath.Join(cache, "typedinformer", "testenv", "bin"), nil
}

// BuildOptions configure [Build].
type BuildOptions struct {
	// Go is the go command to build with; "go" (found in $PATH) if empty.
	Go string
	// Progress receives one line per step, and a line every Heartbeat while a build
	// runs; nothing if nil.
	Progress io.Writer
	// Heartbeat is how often a running build reports that it is still running; 30
	// seconds if zero.
	Heartbeat time.Duration
}

// Build builds every tool that is not cached in dir (creating dir if needed) and
// stamps it, skipping those that are. Each build runs `go build -trimpath` of the
// tool's package in a temporary module made of the pinned go.mod and go.sum (so the
// current module, if any, plays no part), with the environment of this process except
// GOWORK=off; the binary appears in dir only once complete. The first build downloads
// the modules through $GOPROXY and takes a few minutes.
func Build(ctx context.Context, dir string, opts BuildOptions) error {
	if opts.Go == "" {
		opts.Go = "go"
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 30 * time.Second
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	for _, t := range Tools {
		if t.Cached(abs) {
			fmt.Fprintf(opts.Progress, "testenv: %s %s is cached in %s\n", t.Name, t.Version(), abs)
			continue
		}
		if err := build(ctx, t, abs, opts); err != nil {
			return err
		}
	}
	return nil
}

func build(ctx context.Context, t Tool, dir string, opts BuildOptions) error {
	fmt.Fprintf(opts.Progress, "testenv: building %s from %s %s (the first build takes a few minutes)...\n", t.Name, t.Module, t.Version())
	started := time.Now()
	module, err := os.MkdirTemp("", "typedinformer-testenv-"+t.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(module)
	if err := os.WriteFile(filepath.Join(module, "go.mod"), t.GoMod(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(module, "go.sum"), t.GoSum(), 0o644); err != nil {
		return err
	}
	tmp := filepath.Join(dir, fmt.Sprintf("%s.tmp-%d", t.Name, os.Getpid()))
	defer os.Remove(tmp) // a no-op once renamed
	cmd := exec.CommandContext(ctx, opts.Go, "build", "-trimpath", "-o", tmp, t.Package)
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output

	stopHeartbeat := make(chan struct{})
	heartbeatDone := make(chan struct{})
	go func() {
		defer close(heartbeatDone)
		ticker := time.NewTicker(opts.Heartbeat)
		defer ticker.Stop()
		for {
			select {
			case <-stopHeartbeat:
				return
			case <-ticker.C:
				fmt.Fprintf(opts.Progress, "testenv: still building %s (%s)\n", t.Name, time.Since(started).Round(time.Second))
			}
		}
	}()
	err = cmd.Run()
	close(stopHeartbeat)
	<-heartbeatDone
	if err != nil {
		return fmt.Errorf("building %s %s: %s %s: %w\n%s", t.Name, t.Version(), opts.Go, strings.Join(cmd.Args[1:], " "), err, strings.TrimSpace(output.String()))
	}
	if err := os.Rename(tmp, filepath.Join(dir, t.Name)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, t.Name+".stamp"), []byte(t.Stamp()+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(opts.Progress, "testenv: built %s in %s\n", t.Name, time.Since(started).Round(time.Second))
	return nil
}
