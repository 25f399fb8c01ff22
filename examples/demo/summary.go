package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/internal/demo/democluster"
)

// summary prints the reconciles, the convergence of each step, the Events, and the check
// of survivor's caches against the server; it returns an error if they disagree.
func (sh *show) summary(ctx context.Context, cl *democluster.Cluster, survivor *replica) error {
	header("summary")
	fmt.Printf("  cluster      %s\n", cl.Describe)
	var per []string
	for _, r := range sh.replicas {
		per = append(per, fmt.Sprintf("%s %d (%d errors)", r.name, r.metrics.reconciles.Load(), r.metrics.errors.Load()))
	}
	fmt.Printf("  reconciles   %s\n", strings.Join(per, ", "))
	fmt.Printf("  %-12s %-14s %s\n", "step", "converged in", "reconciles")
	for _, s := range sh.steps {
		fmt.Printf("  %-12s %-14s %d\n", s.name, round(s.took), s.reconciles)
	}
	fmt.Printf("  (from the end of the step's changes until the server shows every Website as its spec says)\n")

	events, err := sh.cs.EventsV1().Events(sh.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	reasons := map[string]int32{}
	for _, e := range events.Items {
		if e.Regarding.Kind == website.Kind.Kind && e.ReportingController == website.Component {
			n := int32(1)
			if e.Series != nil {
				n = e.Series.Count
			}
			reasons[e.Type+" "+e.Reason] += n
		}
	}
	var counts []string
	for _, reason := range slices.Sorted(maps.Keys(reasons)) {
		counts = append(counts, fmt.Sprintf("%s ×%d", reason, reasons[reason]))
	}
	fmt.Printf("  events       %s   [events.k8s.io/v1, by %s]\n", strings.Join(counts, ", "), website.Component)

	// The survivor's caches against a fresh List: every object, at the same resource
	// version. A cache may be a watch event behind the server for a moment, so the check
	// is repeated until they agree, or for the step timeout.
	start := time.Now()
	var diff string
	err = wait.PollUntilContextTimeout(ctx, poll, sh.s.timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		diff, err = sh.compareCaches(ctx, survivor)
		return diff == "", err
	})
	if err != nil && ctx.Err() == nil {
		fmt.Printf("  cache        ✗ %s's caches and the server disagree after %s: %s\n", survivor.name, sh.s.timeout, diff)
		return fmt.Errorf("the caches of %s do not match the server: %s", survivor.name, diff)
	}
	if err != nil {
		return err
	}
	fmt.Printf("  cache        ✓ %s's caches match a fresh List from the server (%s), checked in %s\n", survivor.name, sh.cacheCounts(survivor), round(time.Since(start)))
	return nil
}

// compareCaches compares survivor's caches with the server's objects by name and
// resource version, and says how they differ, "" if they do not.
func (sh *show) compareCaches(ctx context.Context, survivor *replica) (string, error) {
	op := survivor.op
	ws, err := sh.dyn.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	ds, err := sh.cs.AppsV1().Deployments(sh.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	cms, err := sh.cs.CoreV1().ConfigMaps(sh.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	server := map[string]map[string]string{"Websites": {}, "Deployments": {}, "ConfigMaps": {}}
	for _, w := range ws.Items {
		server["Websites"][w.GetName()] = w.GetResourceVersion()
	}
	for _, d := range ds.Items {
		server["Deployments"][d.Name] = d.ResourceVersion
	}
	for _, cm := range cms.Items {
		server["ConfigMaps"][cm.Name] = cm.ResourceVersion
	}
	cached := map[string]map[string]string{"Websites": versions(op.Websites.List()), "Deployments": versions(op.Deployments.List()), "ConfigMaps": versions(op.ConfigMaps.List())}
	var diffs []string
	for _, kind := range slices.Sorted(maps.Keys(server)) {
		if !maps.Equal(server[kind], cached[kind]) {
			diffs = append(diffs, fmt.Sprintf("%s: server %v, cache %v", kind, server[kind], cached[kind]))
		}
	}
	return strings.Join(diffs, "; "), nil
}

func (sh *show) cacheCounts(survivor *replica) string {
	op := survivor.op
	return fmt.Sprintf("%d Websites, %d Deployments, %d ConfigMaps", op.Websites.Len(), op.Deployments.Len(), op.ConfigMaps.Len())
}

// versions maps objects' names to their resource versions.
func versions[T metav1.Object](objs []T) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		out[o.GetName()] = o.GetResourceVersion()
	}
	return out
}
