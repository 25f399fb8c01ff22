package prometheus

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/typedinformer/typedinformer/typed"
)

// controller-runtime's names carry exactly controller-runtime's labels, so that its
// dashboards' queries and joins match; a loop's series exist at zero from its start, as
// controller-runtime's do; and the pedantic linter is content.
func TestControllerRuntimeNamesHaveItsLabels(t *testing.T) {
	m := New(Options{NoClientGoMetrics: true})
	m.Workers("pods", 4)
	m.KeysQueued("pods", 3)
	start := time.Now().Add(-time.Second)
	m.WorkStarted("pods", 2*time.Millisecond, start)
	m.WorkStarted("pods", time.Millisecond, time.Now())
	m.QueueDepth("pods", 1)
	m.Retry("pods")
	m.ReconcileLatency("pods", time.Millisecond)
	m.Reconciled("pods", typed.Panicked)
	m.Reconciled("pods", typed.FailedTerminal)
	m.Reconciled("pods", typed.Interrupted)
	m.WorkDone("pods", start)

	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"controller_runtime_reconcile_total":                 {"controller", "result"},
		"controller_runtime_reconcile_errors_total":          {"controller"},
		"controller_runtime_terminal_reconcile_errors_total": {"controller"},
		"controller_runtime_reconcile_panics_total":          {"controller"},
		"controller_runtime_reconcile_time_seconds":          {"controller"},
		"controller_runtime_max_concurrent_reconciles":       {"controller"},
		"controller_runtime_active_workers":                  {"controller"},
		"workqueue_depth":                                    {"controller", "name"},
		"workqueue_adds_total":                               {"controller", "name"},
		"workqueue_queue_duration_seconds":                   {"controller", "name"},
		"workqueue_work_duration_seconds":                    {"controller", "name"},
		"workqueue_unfinished_work_seconds":                  {"controller", "name"},
		"workqueue_longest_running_processor_seconds":        {"controller", "name"},
		"workqueue_retries_total":                            {"controller", "name"},
	}
	values := map[string]float64{}
	for _, f := range families {
		labels, ok := want[f.GetName()]
		if !ok {
			continue
		}
		delete(want, f.GetName())
		for _, s := range f.GetMetric() {
			var got []string
			for _, l := range s.GetLabel() {
				got = append(got, l.GetName())
				if l.GetName() == "result" {
					values["result="+l.GetValue()] = s.GetCounter().GetValue()
				}
			}
			if !slices.Equal(got, labels) {
				t.Errorf("%s has labels %v, want %v", f.GetName(), got, labels)
			}
			if s.GetLabel()[0].GetValue() != "pods" {
				t.Errorf("%s labels %v, want the loop's name", f.GetName(), s.GetLabel())
			}
			values[f.GetName()] = s.GetCounter().GetValue() + s.GetGauge().GetValue() + float64(s.GetHistogram().GetSampleCount())
		}
	}
	for name := range want {
		t.Errorf("%s is not gathered", name)
	}
	for name, v := range map[string]float64{
		"result=success": 0, "result=requeue": 0, "result=requeue_after": 0, "result=error": 2, // interrupted is not counted
		"controller_runtime_reconcile_errors_total": 2, "controller_runtime_terminal_reconcile_errors_total": 1,
		"controller_runtime_reconcile_panics_total": 1, "controller_runtime_max_concurrent_reconciles": 4,
		"controller_runtime_active_workers": 1, "workqueue_adds_total": 3, "workqueue_retries_total": 1, "workqueue_depth": 1,
		"workqueue_queue_duration_seconds": 2, "workqueue_work_duration_seconds": 1, "controller_runtime_reconcile_time_seconds": 1,
	} {
		if values[name] != v {
			t.Errorf("%s = %v, want %v", name, values[name], v)
		}
	}
	if values["workqueue_unfinished_work_seconds"] <= 0 || values["workqueue_longest_running_processor_seconds"] <= 0 {
		t.Errorf("unfinished work %v, longest running %v; want both positive while a key is being worked on",
			values["workqueue_unfinished_work_seconds"], values["workqueue_longest_running_processor_seconds"])
	}
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "go_") || strings.HasPrefix(p.Metric, "process_") {
			continue // the Go and process collectors' own
		}
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
}
