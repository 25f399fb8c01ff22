package main

import (
	"strings"
	"testing"
	"time"
)

const sampleOutput = `goos: linux
goarch: amd64
pkg: github.com/typedinformer/typedinformer/internal/bench
cpu: Intel(R) Xeon(R) Processor
BenchmarkSteadyState/objects=1000/lib=typedinformer-2         	       1	 468600630 ns/op	       111.5 B/event	         4.106 allocs/event	    426744 events/s	         0.6850 handled/event	      2343 ns/event	22308360 B/op	  821194 allocs/op
BenchmarkSteadyState/objects=1000/lib=client-go-2             	       1	 667981813 ns/op	       586.9 B/event	         9.357 allocs/event	    299307 events/s	         1.000 handled/event	      3341 ns/event	117372856 B/op	 1871327 allocs/op
BenchmarkSteadyState/objects=1000/lib=client-go-2             	       1	 667981813 ns/op	       586.9 B/event	         9.357 allocs/event	    399307 events/s	         1.000 handled/event	      3341 ns/event	117372856 B/op	 1871327 allocs/op
BenchmarkSteadyState/objects=1000/lib=client-go-2             	       1	 667981813 ns/op	       586.9 B/event	         9.357 allocs/event	    199307 events/s	         1.000 handled/event	      3341 ns/event	117372856 B/op	 1871327 allocs/op
BenchmarkSteadyState/objects=1000/lib=watch-alone-2             	       1	 363391502 ns/op	   1375669 events/s	     112 B/op	       1 allocs/op
BenchmarkStalledHandler/keys=10000/events=100000/lib=typedinformer-2         	       1	 431635877 ns/op	       118.4 B/event	         4.458 allocs/event	         1.797 heap-MB	      4317 ns/event	11836848 B/op	  445820 allocs/op
BenchmarkStalledHandler/keys=10000/events=100000/lib=client-go-2             	       1	 258632919 ns/op	       657.6 B/event	         9.069 allocs/event	         5.547 heap-MB	      2587 ns/event	65762632 B/op	  906889 allocs/op
BenchmarkStalledHandler/keys=10000/events=1000000/lib=typedinformer-2        	       1	3188977134 ns/op	       117.4 B/event	         4.465 allocs/event	         1.789 heap-MB	      3189 ns/event	117394944 B/op	 4465296 allocs/op
BenchmarkStalledHandler/keys=10000/events=1000000/lib=client-go-2            	       1	3137639343 ns/op	       655.9 B/event	         9.066 allocs/event	        48.98 heap-MB	      3138 ns/event	655920896 B/op	 9065804 allocs/op
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
	if got, _ := r.median("BenchmarkSteadyState/objects=1000/lib=client-go", "events/s"); got != 299307 {
		t.Errorf("median events/s = %v, want 299307", got)
	}
	if n := r.runs("BenchmarkSteadyState/objects=1000/lib=client-go"); n != 3 {
		t.Errorf("runs = %d, want 3", n)
	}
	cases := r.cases("BenchmarkStalledHandler")
	if len(cases) != 2 || cases[0].params != "keys=10000/events=100000" || cases[1].names[ours] == "" {
		t.Errorf("cases = %+v", cases)
	}
	if reason := r.skipReason("BenchmarkControlPlaneSync"); !strings.HasPrefix(reason, "no control plane binaries") {
		t.Errorf("skip reason = %q", reason)
	}

	doc := render(r, machine{cpu: "Test CPU", cores: 2, goVersion: "go1.26", date: time.Unix(0, 0).UTC()},
		runInfo{benchtime: "1x", count: 1, bench: ".", raw: ".cache/bench-raw.txt"})
	for _, want := range []string{
		"| CPU | Test CPU |",
		"| objects=1,000 | events/s | 299,307 | 426,744 | 1.43× | ≥ 3× events/s | ❌ miss |",
		"| objects=1,000 | allocs/event | 9.36 | 4.11 | 2.28× | ≤ 1/3 allocs | ❌ miss |",
		"| typedinformer | 1.8 MB | 1.8 MB | -0.0 MB | flat (+≤ 1 MB or +≤ 10%) | ✅ pass |",
		"| objects=1,000 | 1,375,669 | 299,307 (22%) | 426,744 (31%) | 897,921 (65%) |",
		"**Skipped:** no control plane binaries",
		"benchstat@latest old.txt new.txt",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
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
