package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// row is one line of the table: a metric of each library's results.
type row struct {
	name    string
	results map[string][]result
	metric  func(result) float64
	unit    string
	// target is issue 26's: typedinformer's median at most target times against's, when
	// target is positive.
	target  float64
	against string
}

// variant is a measurement beside the three libraries: typedinformer with an option
// changed, or a bound no cache can go below, with its ratio to what it is compared with.
type variant struct {
	name   string
	value  float64
	unit   string
	ratio  float64
	versus string
}

func median(rs []result, metric func(result) float64) float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = metric(r)
	}
	slices.Sort(vs)
	if len(vs) == 0 {
		return 0
	}
	return vs[len(vs)/2]
}

// render writes the table: each library's median and typedinformer's ratio to the other
// two (typedinformer ÷ other: below 1 typedinformer is better, as the issue writes it).
func render(rows []row, variants []variant, rounds int, loadBefore, loadAfter string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| workload (real kube-apiserver; medians of %d rounds, each subject in its own process) | typedinformer | controller-runtime | client-go | typedinformer ÷ controller-runtime | ÷ client-go | target | result |\n", rounds)
	b.WriteString("|---|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range rows {
		ti, cr, cg := median(r.results["typedinformer"], r.metric), median(r.results["controller-runtime"], r.metric), median(r.results["client-go"], r.metric)
		target, result := "", ""
		if r.target > 0 {
			target = fmt.Sprintf("≤ %.2f× %s's", r.target, r.against)
			result = "❌ miss"
			if ti <= r.target*median(r.results[r.against], r.metric) {
				result = "✅ pass"
			}
		}
		fmt.Fprintf(&b, "| %s | %.1f %s | %.1f %s | %.1f %s | %.2f | %.2f | %s | %s |\n", r.name, ti, r.unit, cr, r.unit, cg, r.unit, ti/cr, ti/cg, target, result)
	}
	if len(rows) > 0 && rows[0].results[pagedLib] != nil {
		// -paged: the A/B of typedinformer's watch-list default, measured in the same run.
		b.WriteString("\n| same workloads, typedinformer with paged lists (manager.Options.NoWatchList) | paged | ÷ typedinformer (watch-list, the default) | ÷ controller-runtime |\n|---|---:|---:|---:|\n")
		for _, r := range rows {
			p := median(r.results[pagedLib], r.metric)
			fmt.Fprintf(&b, "| %s | %.1f %s | %.2f | %.2f |\n", r.name, p, r.unit, p/median(r.results["typedinformer"], r.metric), p/median(r.results["controller-runtime"], r.metric))
		}
	}
	if len(variants) > 0 {
		fmt.Fprintf(&b, "\n| beside them (medians of %d rounds, in the same rounds) | value | ratio | of what |\n|---|---:|---:|---|\n", rounds)
		for _, v := range variants {
			fmt.Fprintf(&b, "| %s | %.1f %s | %.2f | %s |\n", v.name, v.value, v.unit, v.ratio, v.versus)
		}
	}
	fmt.Fprintf(&b, "\nGOMAXPROCS=%d; load average (1, 5, 15 min) %s before the measurements, %s after.\n", runtime.GOMAXPROCS(0), loadBefore, loadAfter)
	return b.String()
}
