// Command setup builds the etcd and kube-apiserver binaries that package testenv starts,
// at the versions this version of typedinformer pins, into a cache directory, and prints
// that directory. Run it once from your module (which requires typedinformer):
//
//	go run github.com/typedinformer/typedinformer/typed/testenv/setup
//
// With no flags it builds into the default directory that testenv looks in
// (typedinformer/testenv/bin in the user's cache directory, such as ~/.cache on Linux),
// so that tests need no configuration. -o builds into another directory instead; point
// testenv at it with $TYPEDINFORMER_CONTROLPLANE_BIN or testenv.Options.BinDir:
//
//	export TYPEDINFORMER_CONTROLPLANE_BIN=$(go run github.com/typedinformer/typedinformer/typed/testenv/setup -o .cache/bin)
//
// The binaries are built from source with the go command (in $PATH, or -go) in a
// temporary module made of typedinformer's pinned go.mod and go.sum, downloading the
// modules through $GOPROXY: the first build takes about 4 minutes on 2 cores; later runs
// find the binaries cached (by a stamp of the pins next to each binary) and return at
// once. Progress goes to standard error, the directory to standard output.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/typedinformer/typedinformer/typed/testenv/internal/binaries"
)

func main() {
	out := flag.String("o", "", "the directory to build into (default: the directory testenv looks in by default)")
	goCmd := flag.String("go", "go", "the go command to build with")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run github.com/typedinformer/typedinformer/typed/testenv/setup [-o dir] [-go command]\n\n"+
			"Builds %s into dir, unless they are already there, and prints dir.\n\n", binaries.Describe())
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	dir, err := run(*out, *goCmd)
	if err != nil {
		fmt.Fprintf(os.Stderr, "setup: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}

func run(dir, goCmd string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = binaries.DefaultDir(); err != nil {
			return "", err
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := binaries.Build(ctx, dir, binaries.BuildOptions{Go: goCmd, Progress: os.Stderr}); err != nil {
		return "", err
	}
	return dir, nil
}
