package guard

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

type depthSink interface{ Depth(name string, n int) }

type panickingSink struct{ calls int }

func (s *panickingSink) Depth(string, int) {
	s.calls++
	panic("sink bug")
}

// A sink's panic is logged with the method and the component, and the caller goes on.
func TestMetricsRecoverAndLogAPanickingSink(t *testing.T) {
	var lines []string
	ctx := klog.NewContext(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
	sink := &panickingSink{}
	m := NewMetrics[depthSink](sink, "controller", "pods")
	m.Call(ctx, "Depth", func(s depthSink) { s.Depth("pods", 1) })
	if sink.calls != 1 || len(lines) != 1 {
		t.Fatalf("%d calls and log lines %q; want one call, logged once", sink.calls, lines)
	}
	for _, want := range []string{`"msg"="Metrics.Depth panicked"`, `"controller"="pods"`, `"panic"="sink bug"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line %s lacks %s", lines[0], want)
		}
	}
}

// No sink, nil or typed nil, is called: Set says so, and Call does nothing.
func TestMetricsWithoutASinkCallNothing(t *testing.T) {
	for name, m := range map[string]Metrics[depthSink]{
		"zero":      {},
		"nil":       NewMetrics[depthSink](nil, "loop", "l"),
		"typed nil": NewMetrics[depthSink]((*panickingSink)(nil), "loop", "l"),
	} {
		called := false
		m.Call(context.Background(), "Depth", func(depthSink) { called = true })
		if m.Set() || called {
			t.Errorf("%s: Set = %v, called = %v; want neither", name, m.Set(), called)
		}
	}
}
