// Command benchreport runs the side-by-side benchmarks of internal/bench (typedinformer's
// controller.Controller against client-go's cache.SharedIndexInformer and its typed
// wrapper cache.TypedSharedIndexInformer[T], on identical input) and writes BENCHMARKS.md
// at the root of the module: the machine and its load, one table per scenario with the
// three libraries, typedinformer's ratio to each client-go informer and the targets of
// the issue (met only if met against both), and how to reproduce the figures. It is what `make bench` runs:
//
//	go run ./internal/cmd/benchreport -benchtime 1x
//
// It runs
//
//	go test -run '^$' -bench . -benchmem -benchtime <benchtime> -count <count> ./internal/bench/
//
// in the module root, printing the output as it comes, saves that raw output as
// .cache/bench-raw.txt (benchstat reads it), and reports the median of the -count runs of
// each benchmark. If go test fails, the raw output is still saved but BENCHMARKS.md is
// left alone, and benchreport exits with status 1.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	benchtime := flag.String("benchtime", "1x", "go test -benchtime: the benchmarks' own batches make 1x meaningful")
	count := flag.Int("count", 1, "go test -count: runs of each benchmark; the report shows the median")
	out := flag.String("out", "BENCHMARKS.md", "the report to write, relative to the module root unless absolute")
	raw := flag.String("raw", filepath.Join(".cache", "bench-raw.txt"), "where to save the raw go test output, relative to the module root unless absolute")
	bench := flag.String("bench", ".", "go test -bench: which benchmarks to run")
	timeout := flag.Duration("timeout", 60*time.Minute, "go test -timeout")
	realAPI := flag.String("realapi", filepath.Join(".cache", "realapi.md"), "the real API server section internal/bench/realapi wrote (make bench runs it first), relative to the module root unless absolute; left out when missing")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./internal/cmd/benchreport [flags]\n\n"+
			"Runs the benchmarks of ./internal/bench and writes BENCHMARKS.md.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 || *count < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*benchtime, *count, *bench, *timeout, *out, *raw, *realAPI); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(benchtime string, count int, bench string, timeout time.Duration, out, raw, realAPI string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	out, raw = underRoot(root, out), underRoot(root, raw)

	args := []string{"test", "-run", "^$", "-bench", bench, "-benchmem",
		"-benchtime", benchtime, "-count", fmt.Sprint(count), "-timeout", timeout.String(), "./internal/bench/"}
	fmt.Fprintf(os.Stderr, "benchreport: go %s\n", strings.Join(args, " "))
	// The machine, and above all the revision, as of before the run: go test builds the
	// code as it is now, and other work may commit or edit meanwhile.
	m := describeMachine(root)
	loadBefore := loadAverage()
	sampler := sampleLoad(5 * time.Second)
	started := time.Now()
	var buf bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Stdout = io.MultiWriter(os.Stdout, &buf)
	cmd.Stderr = cmd.Stdout
	testErr := cmd.Run()
	took := time.Since(started)
	loadPeak := sampler.stop()
	loadAfter := loadAverage()

	if err := os.MkdirAll(filepath.Dir(raw), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(raw, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if testErr != nil {
		return fmt.Errorf("go test failed (%w); its output is in %s; %s was not updated", testErr, raw, out)
	}

	res, err := parse(buf.String())
	if err != nil {
		return fmt.Errorf("parsing the output saved in %s: %w", raw, err)
	}
	m.load, m.loadPeak, m.loadAfter = loadBefore, loadPeak, loadAfter
	section, err := os.ReadFile(underRoot(root, realAPI))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	report := render(res, m, runInfo{benchtime: benchtime, count: count, bench: bench, took: took, raw: rel(root, raw), realAPI: string(section)})
	if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "benchreport: wrote %s (raw output in %s) after %v\n", out, raw, took.Round(time.Second))
	return nil
}

// moduleRoot returns the directory of the main module's go.mod.
func moduleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(b))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module: run benchreport from the typedinformer module")
	}
	return filepath.Dir(gomod), nil
}

func underRoot(root, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}
