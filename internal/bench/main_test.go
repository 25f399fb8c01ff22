package bench

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/klog/v2"
)

// klogErrors collects the errors logged through klog while the benchmarks run. Anything
// written to the test binary's output in the middle of a benchmark would split its
// result line (the name is printed before the run, the numbers after it), breaking
// benchstat and internal/cmd/benchreport, so errors are printed after the last benchmark
// instead, and informational messages (the control plane's progress) are dropped.
var klogErrors struct {
	sync.Mutex
	lines []string
}

func TestMain(m *testing.M) {
	klog.SetLogger(funcr.New(func(prefix, args string) {
		if strings.Contains(args, `"error"=`) {
			klogErrors.Lock()
			klogErrors.lines = append(klogErrors.lines, strings.TrimSpace(prefix+" "+args))
			klogErrors.Unlock()
		}
	}, funcr.Options{}))

	if err := disableWatchListClient(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	code := m.Run()
	stopControlPlane()

	klogErrors.Lock()
	if n := len(klogErrors.lines); n > 0 {
		fmt.Fprintf(os.Stderr, "%d errors were logged during the benchmarks; the first ones:\n", n)
		for _, l := range klogErrors.lines[:min(n, 20)] {
			fmt.Fprintln(os.Stderr, "  "+l)
		}
	}
	klogErrors.Unlock()
	os.Exit(code)
}

// disableWatchListClient turns client-go's WatchListClient feature off, so that its
// reflector lists and then watches, as typedinformer's controller does by default,
// instead of opening a watch-list stream and waiting for the "initial-events-end"
// bookmark that an in-memory source never sends.
//
// What works in client-go v0.37.2: clientfeatures.FeatureGates() is, unless a program
// replaced it, the package's envVarFeatureGates, whose Set method overrides both the
// default (true since 1.35) and KUBE_FEATURE_WatchListClient. The reflector reads the
// gate in NewReflector, that is when an informer starts, so setting it once before any
// benchmark runs is enough. Setting KUBE_FEATURE_WatchListClient=false also works, but
// only if nothing read any client-go feature gate before (the environment is read once,
// on the first Enabled call), which a test binary cannot guarantee; and
// k8s.io/client-go/features/testing.SetFeatureDuringTest does the same Set but needs a
// testing.TB, which TestMain does not have. The gate is checked afterwards, so a future
// client-go that ignores Set fails loudly instead of silently benchmarking watch-list.
func disableWatchListClient() error {
	gates, ok := clientfeatures.FeatureGates().(interface {
		Set(clientfeatures.Feature, bool) error
	})
	if !ok {
		return fmt.Errorf("bench: client-go feature gates %T cannot be set", clientfeatures.FeatureGates())
	}
	if err := gates.Set(clientfeatures.WatchListClient, false); err != nil {
		return fmt.Errorf("bench: turning client-go's WatchListClient off: %w", err)
	}
	if clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		return fmt.Errorf("bench: client-go's WatchListClient is still on")
	}
	return nil
}
