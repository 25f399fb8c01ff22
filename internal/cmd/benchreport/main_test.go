package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const sampleOutput = `goos: linux
goarch: amd64
pkg: github.com/typedinformer/typedinformer/internal/bench
cpu: Intel(R) Xeon(R) Processor
BenchmarkSteadyState/objects=1000/input=fresh/lib=typedinformer-2         	       1	 468600630 ns/op	       111.5 B/event	         4.106 allocs/event	      3000 cpu-ns/event	    426744 events/s	         0.6850 handled/event	      2343 ns/event	22308360 B/op	  821194 allocs/op
BenchmarkSteadyState/objects=1000/input=fresh/lib=client-go-2             	       1	 667981813 ns/op	       586.9 B/event	         9.357 allocs/event	    299307 events/s	         1.000 handled/event	      3341 ns/event	117372856 B/op	 1871327 allocs/op
BenchmarkSteadyState/objects=1000/input=fresh/lib=client-go-2             	       1	 667981813 ns/op	       586.9 B/event	         9.357 allocs/event	    399307 events/s	         1.000 handled/event	      3341 ns/event	117372856 B/op	 1871327 allocs/op
BenchmarkSteadyState/objects=1000/input=fresh/lib=client-go-2             	       1	 667981813 ns/op	       586.9 B/event	         9.357 allocs/event	    199307 events/s	         1.000 handled/event	      3341 ns/event	117372856 B/op	 1871327 allocs/op
BenchmarkSteadyState/objects=1000/input=fresh/lib=client-go-typed-2       	       1	 667981813 ns/op	       590.1 B/event	         9.500 allocs/event	      5000 cpu-ns/event	    100000 events/s	         1.000 handled/event	      3400 ns/event	117372856 B/op	 1871327 allocs/op
BenchmarkSteadyState/objects=1000/input=fresh/lib=watch-alone-2             	       1	 363391502 ns/op	       100 B/event	         3.000 allocs/event	      1000 cpu-ns/event	   1375669 events/s	       727 ns/event	     112 B/op	       1 allocs/op
BenchmarkSteadyState/objects=1000/input=prebuilt/lib=typedinformer-2      	       1	 468600630 ns/op	        16.22 B/event	         1.002 allocs/event	   1000000 events/s	         0.4829 handled/event	      1000 ns/event	 8107928 B/op	  500835 allocs/op
BenchmarkSteadyState/objects=1000/input=prebuilt/lib=client-go-2          	       1	 667981813 ns/op	       770.5 B/event	        11.99 allocs/event	    300000 events/s	         1.000 handled/event	      3333 ns/event	385271992 B/op	 5995950 allocs/op
BenchmarkSteadyState/objects=1000/input=prebuilt/lib=client-go-typed-2    	       1	 667981813 ns/op	       776.5 B/event	        12.37 allocs/event	    250000 events/s	         1.000 handled/event	      4000 ns/event	388239112 B/op	 6186957 allocs/op
BenchmarkSteadyState/objects=1000/input=prebuilt/lib=watch-alone-2       	       1	 250000000 ns/op	         0 B/event	         0 allocs/event	   2000000 events/s	       500 ns/event	       0 B/op	       0 allocs/op
BenchmarkStalledHandler/keys=10000/events=100000/lib=typedinformer-2         	       1	 431635877 ns/op	       118.4 B/event	         4.458 allocs/event	         1.797 heap-MB	      4317 ns/event	11836848 B/op	  445820 allocs/op
BenchmarkStalledHandler/keys=10000/events=100000/lib=client-go-2             	       1	 258632919 ns/op	       657.6 B/event	         9.069 allocs/event	         5.547 heap-MB	      2587 ns/event	65762632 B/op	  906889 allocs/op
BenchmarkStalledHandler/keys=10000/events=100000/lib=client-go-typed-2       	       1	 258632919 ns/op	       660.0 B/event	         9.100 allocs/event	         5.600 heap-MB	      2600 ns/event	65762632 B/op	  906889 allocs/op
BenchmarkStalledHandler/keys=10000/events=1000000/lib=typedinformer-2        	       1	3188977134 ns/op	       117.4 B/event	         4.465 allocs/event	         1.789 heap-MB	      3189 ns/event	117394944 B/op	 4465296 allocs/op
BenchmarkStalledHandler/keys=10000/events=1000000/lib=client-go-2            	       1	3137639343 ns/op	       655.9 B/event	         9.066 allocs/event	        48.98 heap-MB	      3138 ns/event	655920896 B/op	 9065804 allocs/op
BenchmarkStalledHandler/keys=10000/events=1000000/lib=client-go-typed-2      	       1	3137639343 ns/op	       656.0 B/event	         9.070 allocs/event	        49.10 heap-MB	      3140 ns/event	655920896 B/op	 9065804 allocs/op
BenchmarkReads/objects=10000/op=list/lib=typedinformer-2                     	       1	 175000000 ns/op	       175000 ns/read	     82043 B/read	         2.770 allocs/read	      9958 writes/s
BenchmarkReads/objects=10000/op=list/lib=client-go-2                         	       1	 201000000 ns/op	       201000 ns/read	    164970 B/read	        21.70 allocs/read	      9981 writes/s
BenchmarkReads/objects=10000/op=list/lib=client-go-typed-2                   	       1	 150000000 ns/op	       150000 ns/read	    247000 B/read	        22.70 allocs/read	      9970 writes/s
BenchmarkControlPlaneSync
--- SKIP: BenchmarkControlPlaneSync
    controlplane_test.go:98: no control plane binaries: stat /x/etcd: no such file or directory; run ` + "`make controlplane`" + `
PASS
ok  	github.com/typedinformer/typedinformer/internal/bench	28.574s
`

func TestParseAndRender(t *testing.T) {
	r, err := parse(sampleOutput)
	if err != nil {
		t.Fatal(err)
	}
	if r.procs != 2 {
		t.Errorf("procs = %d, want 2", r.procs)
	}
	if got, _ := r.median("BenchmarkSteadyState/objects=1000/input=fresh/lib=client-go", "events/s"); got != 299307 {
		t.Errorf("median events/s = %v, want 299307", got)
	}
	if n := r.runs("BenchmarkSteadyState/objects=1000/input=fresh/lib=client-go"); n != 3 {
		t.Errorf("runs = %d, want 3", n)
	}
	cases := r.cases("BenchmarkStalledHandler")
	if len(cases) != 2 || cases[0].params != "keys=10000/events=100000" || cases[1].names[ours] == "" || cases[1].names[theirsTyped] == "" {
		t.Errorf("cases = %+v", cases)
	}
	steady := r.cases("BenchmarkSteadyState")
	if len(steady) != 2 || steady[0].params != "objects=1000/input=fresh" || steady[1].params != "objects=1000/input=prebuilt" ||
		len(steady[0].names) != 4 {
		t.Errorf("steady-state cases = %+v", steady)
	}
	if len(steady[1].names) != 4 {
		t.Errorf("prebuilt steady-state case = %+v", steady[1])
	}
	if reason := r.skipReason("BenchmarkControlPlaneSync"); !strings.HasPrefix(reason, "no control plane binaries") {
		t.Errorf("skip reason = %q", reason)
	}

	doc := render(r, machine{cpu: "Test CPU", cores: 2, goVersion: "go1.26", date: time.Unix(0, 0).UTC(),
		load: "0.52", loadPeak: "2.31", loadAfter: "1.98"},
		runInfo{benchtime: "1x", count: 1, bench: ".", raw: ".cache/bench-raw.txt"})
	if strings.Contains(doc, "input=prebuilt | allocs/event beyond") || strings.Contains(doc, "input=prebuilt | CPU time/event beyond") {
		t.Errorf("report subtracts an input that costs nothing:\n%s", doc)
	}
	for _, want := range []string{
		"| CPU | Test CPU |",
		"| Load | 0.52 before the run, at most 2.31 during it, 1.98 right after it (1-minute averages;",
		"| client-go typed | unknown: `cache.NewTypedSharedIndexInformer[*corev1.ConfigMap]`",
		// The scenario tables: typedinformer, client-go, client-go typed, then the ratio to each.
		"| case | metric | typedinformer | client-go | client-go typed | × vs client-go | × vs client-go typed | target | result |",
		"|---|---|---:|---:|---:|---:|---:|---|---|",
		// Met against client-go, missed against client-go typed: a miss.
		"| objects=1,000, input=fresh | events/s | 426,744 | 299,307 | 100,000 | 1.43× | 4.27× | ≥ 3× events/s | ❌ miss |",
		"| objects=1,000, input=fresh | allocs/event | 4.11 | 9.36 | 9.50 | 2.28× | 2.31× | ≤ 1/3 allocs | ❌ miss |",
		"| objects=1,000, input=fresh | handler calls/event | 0.685 | 1.00 | 1.00 | — | — |  |  |",
		// Net of the input's own allocations (3 allocs, 100 B an event, from watch-alone).
		"| objects=1,000, input=fresh | allocs/event beyond the input's | 1.11 | 6.36 | 6.50 | 5.75× | 5.88× |  |  |",
		"| objects=1,000, input=fresh | bytes/event beyond the input's | 11.5 B | 487 B | 490 B | 42.34× | 42.62× |  |  |",
		// CPU time where a library has it (client-go's sample has none).
		"| objects=1,000, input=fresh | CPU time/event | 3,000 ns | — | 5,000 ns | — | 1.67× |  |  |",
		"| objects=1,000, input=fresh | CPU time/event beyond the input's | 2,000 ns | — | 4,000 ns | — | 2.00× |  |  |",
		// Met against both: a pass.
		"| objects=1,000, input=prebuilt | events/s | 1,000,000 | 300,000 | 250,000 | 3.33× | 4.00× | ≥ 3× events/s | ✅ pass |",
		"| objects=1,000, input=prebuilt | allocs/event | 1.00 | 12.0 | 12.4 | 11.97× | 12.35× | ≤ 1/3 allocs | ✅ pass |",
		// Met against client-go, missed against client-go typed.
		"| objects=10,000, op=list | time/read | 175 µs | 201 µs | 150 µs | 1.15× | 0.86× | no slower (≥ 0.95×) | ❌ miss |",
		// The summary shows both ratios.
		"| scenario | case | target | × vs client-go | × vs client-go typed | result |",
		"| Steady state: modifications through the watch | objects=1,000, input=prebuilt | ≥ 3× events/s | 3.33× | 4.00× | ✅ pass |",
		"| Stalled handler: memory | keys=10,000, events=100,000 → keys=10,000, events=1,000,000 | flat heap | — | — | ✅ pass |",
		"3 of 6 targets met.",
		// The heap check lists every library.
		"| typedinformer | 1.8 MB | 1.8 MB | -0.0 MB | flat (+≤ 1 MB or +≤ 10%) | ✅ pass |",
		"| client-go | 5.5 MB | 49.0 MB | +43.4 MB |  |  |",
		"| client-go typed | 5.6 MB | 49.1 MB | +43.5 MB |  |  |",
		// The ceiling: the input's own rate and allocations, and 3× the faster client-go.
		"| case | watch alone | input allocs/event | input CPU time/event | typedinformer | client-go | client-go typed | target rate (3× the faster client-go) |",
		"| objects=1,000, input=fresh | 1,375,669 | 3.00 (100 B) | 1,000 ns | 426,744 (31%) | 299,307 (22%) | 100,000 (7%) | 897,921 (65%) |",
		// The prebuilt input costs nothing: no line beyond the input's, and zeros in the ceiling.
		"| objects=1,000, input=prebuilt | 2,000,000 | 0 (0 B) | — | 1,000,000 (50%) | 300,000 (15%) | 250,000 (12%) | 900,000 (45%) |",
		"**Skipped:** no control plane binaries",
		"benchstat@latest old.txt new.txt",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
	}
}

// TestRenderTwoLibraries renders the output of a run without client-go's typed informer
// (an older raw file): its columns show "—" and the targets are judged on client-go alone.
func TestRenderTwoLibraries(t *testing.T) {
	var lines []string
	for _, l := range strings.Split(sampleOutput, "\n") {
		if !strings.Contains(l, "lib=client-go-typed") {
			lines = append(lines, l)
		}
	}
	r, err := parse(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	doc := render(r, machine{date: time.Unix(0, 0).UTC()}, runInfo{benchtime: "1x", count: 1, bench: "."})
	for _, want := range []string{
		"| objects=1,000, input=prebuilt | events/s | 1,000,000 | 300,000 | — | 3.33× | — | ≥ 3× events/s | ✅ pass |",
		"| objects=10,000, op=list | time/read | 175 µs | 201 µs | — | 1.15× | — | no slower (≥ 0.95×) | ✅ pass |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "input=prebuilt | allocs/event beyond") {
		t.Errorf("report subtracts an input it has no figures for:\n%s", doc)
	}
	if strings.Contains(doc, "| client-go typed | 5.6 MB") || strings.Contains(doc, "| Load |") {
		t.Errorf("report shows a library or a load it has no figures for:\n%s", doc)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{count(1234567), "1,234,567"},
		{count(999), "999"},
		{decimal(0.06899), "0.069"},
		{decimal(4.106), "4.11"},
		{nanos(2343), "2,343 ns"},
		{nanos(258293), "258 µs"},
		{nanos(28134279), "28.1 ms"},
		{nanos(3188977134), "3.19 s"},
		{caseText("keys=10000/events=1000000"), "keys=10,000, events=1,000,000"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// shardingOutput is a run of the sharding benchmarks alone (lines as go test printed them).
const shardingOutput = `goos: linux
goarch: amd64
pkg: github.com/typedinformer/typedinformer/internal/bench
cpu: AMD EPYC
BenchmarkShardedReconcile/replicas=1-2         	       1	6035182756 ns/op	      1408 busiest-ms	         0.05319 cpu-share	        10.45 deliver-ms	       710.3 keys/s	      1000 max-keys	        64.00 max-shards	         5.598 reconcile-ms	         1.000 server-filtered	         1.694 settle-s	       506.0 stream-keys/s	         0.9941 worker-busy	      1904 write-ms
BenchmarkShardedReconcile/replicas=2-2         	       1	6758098298 ns/op	       739.7 busiest-ms	         0.05666 cpu-share	         5.945 deliver-ms	      1352 keys/s	       523.0 max-keys	        33.00 max-shards	         5.631 reconcile-ms	         1.000 server-filtered	         1.331 settle-s	       347.0 stream-keys/s	         0.9515 worker-busy	      2874 write-ms
BenchmarkShardedReconcile/replicas=4-2         	       1	5879296977 ns/op	       401.3 busiest-ms	         0.07624 cpu-share	         4.589 deliver-ms	      2491 keys/s	       273.0 max-keys	        17.00 max-shards	         5.838 reconcile-ms	         0.000 server-filtered	         0.9521 settle-s	       360.8 stream-keys/s	         0.9089 worker-busy	      2743 write-ms
BenchmarkShardHandOver/leave=crash-2         	       1	9094348630 ns/op	         9.069 first-max-s	         8.424 first-median-s	         9.085 handover-max-s	         8.548 handover-median-s	         4.000 lease-s	        33.00 moved-shards
BenchmarkShardHandOver/leave=stop-2          	       1	1854583644 ns/op	         1.525 first-max-s	         1.434 first-median-s	         1.849 handover-max-s	         1.701 handover-median-s	         4.000 lease-s	        33.00 moved-shards
PASS
ok  	github.com/typedinformer/typedinformer/internal/bench	23.760s
`

// TestRenderSharding renders the sharding scenarios: keys/s with the ratio to one replica
// and the 3.2× target at 4 replicas, in a summary table of its own, and the hand-over
// times against the lease duration.
func TestRenderSharding(t *testing.T) {
	r, err := parse(shardingOutput)
	if err != nil {
		t.Fatal(err)
	}
	doc := render(r, machine{date: time.Unix(0, 0).UTC()}, runInfo{benchtime: "1x", count: 1, bench: "Shard"})
	for _, want := range []string{
		"1 of 1 targets met.",
		"| scenario | case | target | × vs 1 replica | result |\n|---|---|---|---:|---|\n" +
			"| Sharding | replicas=4 | ≥ 3.2× keys/s | 3.51× | ✅ pass |\n",
		"| replicas=1 | 710 | 1.00× | 1.00× |  |  | 64, 1,000 | 5.60 ms | 99% | 5% | 506 | 1.90 s | 1.69 s |",
		"| replicas=2 | 1,352 | 1.90× | 1.91× |  |  | 33, 523 | 5.63 ms | 95% | 6% | 347 | 2.87 s | 1.33 s |",
		"| replicas=4 | 2,491 | 3.51× | 3.66× | ≥ 3.2× keys/s | ✅ pass | 17, 273 | 5.84 ms | 91% | 8% | 361 | 2.74 s | 952 ms |",
		"**The API server did not apply the shard selectors** (replicas=4)",
		"| leave=crash | 4.00 s | 33 | 8.42 s, 9.07 s | 8.55 s, 9.09 s | 2.27× |",
		"| leave=stop | 4.00 s | 33 | 1.43 s, 1.52 s | 1.70 s, 1.85 s | 0.46× |",
		"Not run (see `-bench`).", // the other scenarios
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "**The API server did not apply the shard selectors** (replicas=1)") {
		t.Errorf("report says a filtered run was not:\n%s", doc)
	}

	if strings.Contains(doc, "× vs client-go |") {
		t.Errorf("report has a summary of library targets without any:\n%s", doc)
	}

	// 2.9× at 4 replicas misses.
	missed := strings.Replace(shardingOutput, "2491 keys/s", "2059 keys/s", 1)
	if r, err = parse(missed); err != nil {
		t.Fatal(err)
	}
	doc = render(r, machine{date: time.Unix(0, 0).UTC()}, runInfo{benchtime: "1x", count: 1, bench: "Shard"})
	for _, want := range []string{
		"0 of 1 targets met.",
		"| Sharding | replicas=4 | ≥ 3.2× keys/s | 2.90× | ❌ miss |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
	}
}

// The real API server section that internal/bench/realapi wrote comes after the
// scenarios, numbered after them, as written; without one there is no such section.
func TestRenderEmbedsTheRealAPIServerSection(t *testing.T) {
	r, err := parse(shardingOutput)
	if err != nil {
		t.Fatal(err)
	}
	section := "| workload | typedinformer |\n|---|---:|\n| CRD sync | 1 ms |\n"
	doc := render(r, machine{date: time.Unix(0, 0).UTC()}, runInfo{benchtime: "1x", count: 1, bench: "Shard", realAPI: section})
	want := fmt.Sprintf("## %d. Real API server: typedinformer, controller-runtime and client-go\n\n%s\n## How to reproduce", len(scenarios)+1, section)
	if !strings.Contains(doc, want) {
		t.Errorf("report lacks %q:\n%s", want, doc)
	}
	if doc = render(r, machine{date: time.Unix(0, 0).UTC()}, runInfo{benchtime: "1x", count: 1, bench: "Shard"}); strings.Contains(doc, "Real API server") {
		t.Errorf("report has a real API server section without one written:\n%s", doc)
	}
}
