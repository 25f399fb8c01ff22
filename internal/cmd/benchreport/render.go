package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The libraries, as the lib= element of the benchmark names spells them.
const (
	ours = "typedinformer"
	// theirs is client-go's SharedIndexInformer.
	theirs = "client-go"
	// theirsTyped is client-go's TypedSharedIndexInformer[T] over the same informer.
	theirsTyped = "client-go-typed"
	// alone is the steady state's input without any library: its ceiling.
	alone = "watch-alone"
)

// baseline is one of the client-go informers typedinformer is compared with, in the
// order of the report's columns.
type baseline struct {
	lib   string // lib= element
	label string // column heading
}

var baselines = []baseline{
	{lib: theirs, label: "client-go"},
	{lib: theirsTyped, label: "client-go typed"},
}

// metric is one line of a scenario's table.
type metric struct {
	unit  string // as go test prints it
	label string
	// rate is true for metrics where more is better (events/s); the ratio is then
	// typedinformer / client-go, otherwise client-go / typedinformer, so that a ratio
	// above 1 always means that typedinformer does better. There is one ratio for each
	// client-go informer (baselines).
	rate bool
	// noRatio shows no ratio: the metric describes behaviour, not cost.
	noRatio bool
	// lessInput subtracts the input's own figure (lib=watch-alone, same case) from each
	// library's: what the library adds to the cost of receiving the events. The line is
	// left out where the input costs (next to) nothing, under 1 a unit, or was not measured.
	lessInput bool
	// target is the least ratio that meets the target, 0 for none. It is met only
	// if both ratios (against client-go's untyped and typed informers) reach it.
	target     float64
	targetText string
	format     func(float64) string
}

// scenario is one section of the report, for one top-level benchmark.
type scenario struct {
	bench   string // top-level benchmark name, "BenchmarkSteadyState"
	title   string
	about   string
	metrics []metric
	notes   string
	// flat, when set, adds the stalled-handler check: does the heap stay flat from the
	// case with the fewest events to the case with the most?
	flat bool
	// ceiling, when set, adds the rate of the input alone (lib=watch-alone), its own
	// allocations, and where the rate target lies against it.
	ceiling bool
	// custom, when set, writes the scenario's tables instead of the side-by-side table
	// of the libraries, for a scenario of typedinformer alone, and returns its verdicts.
	custom func(b *strings.Builder, r *results, cases []benchCase) []verdict
}

var scenarios = []scenario{
	{
		bench: "BenchmarkSteadyState",
		title: "Steady state: modifications through the watch",
		about: "The cache holds N objects; modifications of them (round robin over the keys) stream " +
			"through the watch to one handler that only counts. One op is a batch of 500,000 " +
			"events, timed from the first push until the handler has seen the last state of every key.\n\n" +
			"Two inputs: *input=fresh* allocates each event's object as it is pushed, every string and map " +
			"new and no TypeMeta, as client-go's watch decoder hands out objects through a generated typed " +
			"client, and the object becomes garbage once the cache replaces it; this is what a real watch " +
			"looks like to the library, and the pushing goroutine's allocations (*watch alone* below) are " +
			"counted in every column alike. *input=prebuilt* pushes objects built before the timed part and " +
			"kept alive by the benchmark (a distinct object per event, but no allocation and no garbage from " +
			"the input): the libraries' own cost alone, a lower bound that flatters allocation ratios.",
		metrics: []metric{
			{unit: "events/s", label: "events/s", rate: true, target: 3, targetText: "≥ 3× events/s", format: count},
			{unit: "allocs/event", label: "allocs/event", target: 3, targetText: "≤ 1/3 allocs", format: decimal},
			{unit: "allocs/event", label: "allocs/event beyond the input's", lessInput: true, format: decimal},
			{unit: "B/event", label: "bytes/event", format: byteSize},
			{unit: "B/event", label: "bytes/event beyond the input's", lessInput: true, format: byteSize},
			{unit: "ns/event", label: "time/event", format: nanos},
			{unit: "cpu-ns/event", label: "CPU time/event", format: nanos},
			{unit: "cpu-ns/event", label: "CPU time/event beyond the input's", lessInput: true, format: nanos},
			{unit: "handled/event", label: "handler calls/event", noRatio: true, format: decimal},
		},
		notes: "*handler calls/event* below 1 means that typedinformer merged consecutive modifications " +
			"of a key that was still pending (its per-key compression: the handler gets the newest state); " +
			"client-go calls the handler once per event. All runs end in the same state. The lines *beyond the " +
			"input's* subtract the input's own cost (*watch alone*, in the table above) from each library's: what the " +
			"library itself allocates and spends per event (the targets are judged on the totals). *CPU time/event* " +
			"is the whole process's user and system time over both cores (library, input and garbage collector) " +
			"divided by the events: where the input is the bottleneck, as the fresh input tends to be on two cores, " +
			"the libraries reach similar rates and this is what still tells their costs apart. client-go typed " +
			"is the same informer as client-go under a wrapper that type-asserts each object for the typed " +
			"handler, so the two differ by noise plus a few nanoseconds per event.",
		ceiling: true,
	},
	{
		bench: "BenchmarkInitialSync",
		title: "Initial sync",
		about: "A new controller or informer lists N objects (one in-memory list) until its handler has " +
			"received every addition and both it and the handler's registration report synced. " +
			"One op is one full sync, after one untimed warm-up sync.",
		metrics: []metric{
			{unit: "ns/object", label: "time/object", target: 2.5, targetText: "≥ 2.5× faster", format: nanos},
			{unit: "B/object", label: "bytes/object", target: 2, targetText: "≤ 1/2 bytes", format: byteSize},
			{unit: "allocs/object", label: "allocs/object", format: decimal},
			{unit: "ns/op", label: "time to sync", format: nanos},
		},
	},
	{
		bench: "BenchmarkStalledHandler",
		title: "Stalled handler: memory",
		about: "After the sync of 10,000 objects the one handler blocks on its first modification; then " +
			"M modifications over the 10,000 keys stream in. *heap* is the growth of HeapInuse (after " +
			"two GCs) from after the sync to when every event has reached the handler's backlog. " +
			"The handler is then released and the library stopped.",
		metrics: []metric{
			{unit: "heap-MB", label: "heap growth", format: megabytes},
			{unit: "ns/event", label: "time/event", format: nanos},
			{unit: "B/event", label: "bytes/event", format: byteSize},
		},
		flat: true,
	},
	{
		bench: "BenchmarkReads",
		title: "Reads while writes stream in",
		about: "The cache holds 10,000 objects in 10 namespaces while modifications stream in at " +
			"10,000/s. *get*: typedinformer `Store().Get(key)` vs client-go `GetByKey` plus the type " +
			"assertion; *list*: `Store().List()` vs indexer `List()`; *by-namespace*: " +
			"`Store().ByIndex(eventcache.NamespaceIndex, ns)` (1,000 objects) vs indexer " +
			"`ByIndex(cache.NamespaceIndex, ns)`. client-go typed reads through `GetTypedIndexer()`: " +
			"`ByTypedIndex(cache.NamespaceIndex, ns)` for *by-namespace*; its `TypedIndexer` has no typed " +
			"Get or List, so *get* is `GetByKey` plus the assertion as for client-go, and *list* converts " +
			"`List()` to `[]*corev1.ConfigMap` (as `ByTypedIndex` does). One op is a batch of reads of one kind.",
		metrics: []metric{
			{unit: "ns/read", label: "time/read", target: 0.95, targetText: "no slower (≥ 0.95×)", format: nanos},
			{unit: "B/read", label: "bytes/read", format: byteSize},
			{unit: "allocs/read", label: "allocs/read", format: decimal},
			{unit: "writes/s", label: "writes absorbed/s", rate: true, format: count},
		},
		notes: "The allocation figures include the write pipeline's allocations during the reads (which is " +
			"all that *get* shows: it allocates nothing itself). client-go's `List` and `ByIndex` return " +
			"`[]interface{}`; client-go typed's *list* and *by-namespace* pay a conversion pass to a typed " +
			"slice on top, which typedinformer's typed results do not need. *writes absorbed/s* is the " +
			"write rate each library sustained while being read (the writer catches up when held up); " +
			"below 10,000 means that readers held writes back. The target allows 5% for measurement noise.",
	},
	{
		bench: "BenchmarkControlPlaneSync",
		title: "Real control plane: sync from kube-apiserver",
		about: "10,000 ConfigMaps in one namespace of a local etcd and kube-apiserver (typed/testenv), " +
			"read through a generated typed client (`clientset.CoreV1().ConfigMaps(ns)`), over HTTP/2 on " +
			"loopback. Time from starting the library to every addition delivered and synced, after one " +
			"untimed warm-up sync. Decoding the list, the same client-go code for all, dominates.",
		metrics: []metric{
			{unit: "ns/op", label: "time to sync", format: nanos},
			{unit: "B/object", label: "bytes/object", format: byteSize},
			{unit: "allocs/object", label: "allocs/object", format: decimal},
		},
	},
	{
		bench: "BenchmarkShardedReconcile",
		title: "Sharding: reconcile throughput with 1, 2 and 4 replicas",
		about: "typedinformer alone (client-go has no sharding). 1,000 ConfigMaps on the local control plane " +
			"(kube-apiserver with `ShardedListAndWatch`, so that each shard's watch carries its own objects only), " +
			"64 shards by UID (`typed/shard`), 1, 2 and 4 replicas in one process, each on connections of its own " +
			"(`internal/testsupport/shardreplica`), 4 workers per replica, and a reconciler that takes 5 ms per key. " +
			"The reconciler **sleeps** rather than computes: the replicas share this machine's cores, where on a " +
			"cluster each would have its own, so a CPU-bound reconciler would measure the cores, not the sharding. " +
			"Leases of 4 s (renew deadline 3 s, retry 0.5 s). Once the shards have settled (each replica holds what " +
			"`Assign` gives it, every key reconciled, no reconcile for 1 s), every ConfigMap is changed and the time " +
			"runs until each key has been reconciled with its new data. *keys/s* is the backlog: the reconciles wait " +
			"at a gate until every change is in the replicas' caches, and the time runs from opening it, so that it " +
			"measures the replicas' reconcile capacity, not how fast this machine can write. *stream keys/s* times " +
			"another round from the first write, with no gate, 32 writers: it includes the writes.",
		custom: renderShardedReconcile,
		notes: "*× vs 1 replica* divides keys/s by the 1-replica figure of the same run. *bound from balance* is " +
			"what the keys of the busiest replica alone allow: 1,000 keys ÷ its keys (Assign caps a replica at " +
			"ceil(64/N)+1 shards, and shards hold different numbers of keys). *reconcile* is the mean wall time of " +
			"one 5 ms sleep: above 5 ms, the sleeper was woken late (timer slack, busy cores), which slows every " +
			"replica alike. *workers busy* is the share of the replicas' worker time spent reconciling during the " +
			"backlog; *process CPU* the share of both cores the benchmark process used meanwhile (the replicas; etcd " +
			"and kube-apiserver are other processes). Where *write* exceeds the backlog's time, *stream keys/s* " +
			"measures the writer and the API server rather than the replicas.",
	},
	{
		bench: "BenchmarkShardHandOver",
		title: "Sharding: hand-over time vs lease duration",
		about: "Two replicas as above share the 64 shards; once settled, one goes away and, right after, one " +
			"ConfigMap of each of its shards changes (the shard's last in list order, which the new owner's " +
			"initial reconciles of the shard reach last). *leave=crash* cuts the replica off from the API server " +
			"(no renewal, no release: its Leases must expire); *leave=stop* stops it, which releases its shards' " +
			"Leases and deletes its member Lease. Times run from the departure to the survivor's first reconcile of " +
			"each moved shard (the Sharder's hand-over), and to its reconcile of each change.",
		custom: renderShardHandOver,
		notes: "After a crash the survivor takes the shards once the member Lease has expired, a lease duration " +
			"after the last renewal it saw, and takes over each shard's Lease at once, having seen it unrenewed " +
			"as long: about one lease duration in all, plus the shards' lists and initial reconciles. " +
			"Issue 12's bound for a change after a move is the lease duration plus 10 s. After a stop, the hand-over is the " +
			"survivor's next membership check (every 0.5 s), the acquisition of the released Leases, the shards' " +
			"lists and their initial reconciles (the moved shards' ~500 keys, 4 workers).",
	},
	{
		bench: "BenchmarkReconcileLoop",
		title: "Read-your-writes: what the gate costs keys with no write pending",
		about: "typedinformer alone (the gate is its own): 1,000 cached ConfigMaps; modifications (prebuilt, round " +
			"robin over the keys) stream through the watch to a `typed.Loop` with 2 workers whose reconciler only reads " +
			"its request, so no key ever waits. *read-your-writes* is the default Loop; *ungated* sets " +
			"`typed.Options.DisableReadYourWrites`. One op is 5 rounds; each streams a batch of 200,000 events to each " +
			"Loop in turn, timed until every key has been reconciled with its last state.",
		custom: renderReconcileLoop,
		notes: "Both Loops run in one process, over caches of the same objects, and each round streams the same batch " +
			"to the gated Loop and then to the ungated one, so the ratio compares paired rounds (its median over the " +
			"rounds). *events/s* is the workload's throughput; the Loop merges the events of a key that is still queued, so " +
			"*reconciles/event* varies from run to run, and *CPU time/reconcile* (the whole process's, during that Loop's " +
			"rounds) and *allocs/reconcile* divide by the reconciles. Each reconcile with read-your-writes carries a " +
			"recorder in its context: one small allocation.",
	},
}

// renderReconcileLoop writes the gated and ungated Loop side by side, and the gate's
// verdict: the default Loop keeps at least 95% of the ungated one's throughput.
func renderReconcileLoop(b *strings.Builder, r *results, cases []benchCase) []verdict {
	fmt.Fprintf(b, "| case | loop | events/s | reconciles/event | CPU time/reconcile | allocs/reconcile | events/s ÷ ungated (paired rounds) | target | result |\n")
	fmt.Fprintf(b, "|---|---|---:|---:|---:|---:|---:|---|---|\n")
	var verdicts []verdict
	for _, c := range cases {
		name := c.names[""]
		cell := func(unit string, format func(float64) string) string {
			if v, ok := r.median(name, unit); ok {
				return format(v)
			}
			return "—"
		}
		ratio, result := "—", "n/a"
		if x, ok := r.median(name, "gated/ungated"); ok {
			ratio, result = formatRatio(x), "miss"
			if x >= 0.95 {
				result = "pass"
			}
		}
		const target = "≥ 0.95× events/s"
		verdicts = append(verdicts, verdict{scenario: "Read-your-writes", cas: caseText(c.params), target: target,
			ratios: []string{ratio}, result: result, base: "the ungated Loop"})
		for _, p := range []struct{ loop, prefix, ratio, target, result string }{
			{"read-your-writes (default)", "", ratio, target, mark(result)}, {"ungated", "ungated-", "", "", ""},
		} {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", caseText(c.params), p.loop,
				cell(p.prefix+"events/s", count), cell(p.prefix+"reconciles/event", decimal),
				cell(p.prefix+"cpu-ns/reconcile", nanos), cell(p.prefix+"allocs/reconcile", decimal), p.ratio, p.target, p.result)
		}
	}
	fmt.Fprintf(b, "\n")
	return verdicts
}

// runInfo says how the benchmarks were run.
type runInfo struct {
	benchtime string
	count     int
	bench     string
	took      time.Duration
	raw       string
	// realAPI is the real API server section internal/bench/realapi wrote (its own
	// Markdown, with its run's load and command), or "" when there is none.
	realAPI string
}

// verdict is one target's outcome, for the summary.
type verdict struct {
	scenario, cas, target, result string
	// ratios holds the ratio against each baseline, formatted, in the order of baselines.
	ratios []string
	// base, when set, is what the one ratio in ratios compares with instead of the
	// client-go informers, such as "1 replica"; such verdicts get a table of their own.
	base string
}

func render(r *results, m machine, run runInfo) string {
	var b strings.Builder
	var verdicts []verdict
	var body strings.Builder
	for i, sc := range scenarios {
		verdicts = append(verdicts, renderScenario(&body, r, i+1, sc)...)
	}

	fmt.Fprintf(&b, "# Benchmarks: typedinformer and client-go side by side\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (`go run ./internal/cmd/benchreport`) on %s. "+
		"Do not edit: run `make bench` again. The raw `go test` output is in `%s`.\n\n",
		m.date.Format("2006-01-02 15:04 MST"), run.raw)

	fmt.Fprintf(&b, "## Machine\n\n| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| CPU | %s |\n", m.cpu)
	procs := ""
	if r.procs > 0 {
		procs = fmt.Sprintf(", GOMAXPROCS=%d", r.procs)
	}
	fmt.Fprintf(&b, "| Cores | %d logical%s |\n", m.cores, procs)
	fmt.Fprintf(&b, "| Go | %s, %s", m.goVersion, m.osArch)
	if m.kernel != "" {
		fmt.Fprintf(&b, ", Linux %s", m.kernel)
	}
	fmt.Fprintf(&b, " |\n")
	fmt.Fprintf(&b, "| client-go | %s: `cache.NewSharedIndexInformer`, no resync, namespace index, WatchListClient off |\n", orUnknown(m.clientGo))
	fmt.Fprintf(&b, "| client-go typed | %s: `cache.NewTypedSharedIndexInformer[*corev1.ConfigMap]` over the same "+
		"`cache.NewSharedIndexInformer`: typed namespace index (`AddTypedIndexers`), `AddTypedEventHandler`, reads through `GetTypedIndexer()` |\n",
		orUnknown(m.clientGo))
	fmt.Fprintf(&b, "| typedinformer | %s: `controller.New`, default options (watch-list off) |\n", orUnknown(m.revision))
	fmt.Fprintf(&b, "| Date | %s |\n", m.date.Format(time.RFC3339))
	if load := m.loadText(); load != "" {
		fmt.Fprintf(&b, "| Load | %s |\n", load)
	}
	fmt.Fprintf(&b, "| Command | `go test -run '^$' -bench '%s' -benchmem -benchtime %s -count %d ./internal/bench/` (%v) |\n",
		run.bench, run.benchtime, run.count, run.took.Round(time.Second))
	fmt.Fprintf(&b, "\n")

	fmt.Fprintf(&b, "## How to read the tables\n\n")
	fmt.Fprintf(&b, "Three libraries run one after the other in the same run: typedinformer, client-go's "+
		"`SharedIndexInformer` (*client-go*) and the same informer behind client-go's typed wrapper, "+
		"`TypedSharedIndexInformer[*corev1.ConfigMap]` (*client-go typed*). All three get identical input: "+
		"the same `*corev1.ConfigMap` objects (or, for the steady state's *input=fresh*, objects allocated "+
		"the same way as each event is pushed), through the same in-memory list and watch (an unbuffered "+
		"channel, like a real watch), built before the timed part (the real control plane scenarios read from a real "+
		"kube-apiserver instead). Each runs with one handler. The sharding scenarios run typedinformer alone, "+
		"client-go having no sharding: their ratios compare its replicas with one replica.\n\n")
	fmt.Fprintf(&b, "**×** is how much better typedinformer does than each client-go informer: client-go ÷ typedinformer "+
		"for costs (time, bytes, allocations, heap) and typedinformer ÷ client-go for rates (events/s, writes/s). "+
		"**Above 1× typedinformer is better; below 1× client-go is.** ")
	if run.count > 1 {
		fmt.Fprintf(&b, "Each figure is the median of %d runs. ", run.count)
	} else {
		fmt.Fprintf(&b, "Each figure comes from a single run (`-count 1`): expect a few percent of noise, "+
			"more on a busy machine; use `-count` for medians. ")
	}
	fmt.Fprintf(&b, "Targets are the issue's, as ratios to client-go v0.37.2 in the same run; *result* says whether "+
		"typedinformer meets them against both client-go informers (a miss against either is a miss).\n\n")

	fmt.Fprintf(&b, "## Targets\n\n")
	met := 0
	for _, v := range verdicts {
		if v.result == "pass" {
			met++
		}
	}
	fmt.Fprintf(&b, "%d of %d targets met.\n\n", met, len(verdicts))
	if slices.ContainsFunc(verdicts, func(v verdict) bool { return v.base == "" }) {
		fmt.Fprintf(&b, "| scenario | case | target |")
		for _, bl := range baselines {
			fmt.Fprintf(&b, " × vs %s |", bl.label)
		}
		fmt.Fprintf(&b, " result |\n|---|---|---|%s---|\n", strings.Repeat("---:|", len(baselines)))
		for _, v := range verdicts {
			if v.base == "" {
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", v.scenario, v.cas, v.target, strings.Join(v.ratios, " | "), mark(v.result))
			}
		}
		fmt.Fprintf(&b, "\n")
	}
	// The targets of typedinformer alone, one table per base, in order of appearance.
	var bases []string
	for _, v := range verdicts {
		if v.base != "" && !slices.Contains(bases, v.base) {
			bases = append(bases, v.base)
		}
	}
	for _, base := range bases {
		fmt.Fprintf(&b, "| scenario | case | target | × vs %s | result |\n|---|---|---|---:|---|\n", base)
		for _, v := range verdicts {
			if v.base == base {
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", v.scenario, v.cas, v.target, strings.Join(v.ratios, " | "), mark(v.result))
			}
		}
		fmt.Fprintf(&b, "\n")
	}

	b.WriteString(body.String())
	if run.realAPI != "" {
		fmt.Fprintf(&b, "## %d. Real API server: typedinformer, controller-runtime and client-go\n\n%s\n\n", len(scenarios)+1, strings.TrimSpace(run.realAPI))
	}

	fmt.Fprintf(&b, "## How to reproduce\n\n")
	fmt.Fprintf(&b, "```sh\n")
	fmt.Fprintf(&b, "make bench                      # builds etcd and kube-apiserver once, runs everything, rewrites BENCHMARKS.md\n")
	fmt.Fprintf(&b, "make bench BENCHTIME=5x         # more ops per benchmark\n")
	fmt.Fprintf(&b, "go run ./internal/cmd/benchreport -count 5           # medians of 5 runs\n")
	fmt.Fprintf(&b, "go run ./internal/cmd/benchreport -bench SteadyState # one scenario\n")
	fmt.Fprintf(&b, "go test -run '^$' -bench Shard -benchtime 1x ./internal/bench/ # the sharding scenarios alone, without rewriting BENCHMARKS.md\n")
	fmt.Fprintf(&b, "```\n\n")
	fmt.Fprintf(&b, "Without the control plane binaries (`make controlplane`) the real control plane scenarios are skipped.\n\n")
	fmt.Fprintf(&b, "To compare two versions of typedinformer, run the benchmarks on each and compare with benchstat:\n\n")
	fmt.Fprintf(&b, "```sh\n")
	fmt.Fprintf(&b, "git checkout OLD && go test -run '^$' -bench . -benchmem -count 10 ./internal/bench/ | tee old.txt\n")
	fmt.Fprintf(&b, "git checkout NEW && go test -run '^$' -bench . -benchmem -count 10 ./internal/bench/ | tee new.txt\n")
	fmt.Fprintf(&b, "go run golang.org/x/perf/cmd/benchstat@latest old.txt new.txt\n")
	fmt.Fprintf(&b, "```\n\n")
	fmt.Fprintf(&b, "benchstat also puts the libraries of one run side by side: "+
		"`go run golang.org/x/perf/cmd/benchstat@latest -col /lib %s`.\n\n", run.raw)
	fmt.Fprintf(&b, "Profiles of one library in one scenario: "+
		"`go test -run '^$' -bench 'SteadyState/objects=1000/input=fresh/lib=typedinformer' -benchtime 3x "+
		"-cpuprofile cpu.out -memprofile mem.out ./internal/bench/`, then `go tool pprof -top cpu.out` "+
		"(`lib=client-go`, `lib=client-go-typed` for the others).\n")
	return b.String()
}

// ratio returns how much better ti is than cg for mt (above 1: typedinformer better),
// NaN where it is undefined.
func ratio(mt metric, ti, cg float64) float64 {
	switch {
	case mt.rate && cg != 0:
		return ti / cg
	case !mt.rate && ti != 0:
		return cg / ti
	}
	return math.NaN()
}

// renderScenario writes scenario number n and returns the verdicts of its targets.
func renderScenario(b *strings.Builder, r *results, n int, sc scenario) []verdict {
	fmt.Fprintf(b, "## %d. %s\n\n%s\n\n", n, sc.title, sc.about)
	cases := r.cases(sc.bench)
	if reason := r.skipReason(sc.bench); reason != "" && len(cases) == 0 {
		fmt.Fprintf(b, "**Skipped:** %s\n\n", reason)
		return nil
	}
	if len(cases) == 0 {
		fmt.Fprintf(b, "Not run (see `-bench`).\n\n")
		return nil
	}
	for _, line := range r.logs[sc.bench] {
		fmt.Fprintf(b, "> %s\n", line)
	}
	if len(r.logs[sc.bench]) > 0 {
		fmt.Fprintf(b, "\n")
	}
	if sc.custom != nil {
		verdicts := sc.custom(b, r, cases)
		if sc.notes != "" {
			fmt.Fprintf(b, "%s\n\n", sc.notes)
		}
		return verdicts
	}
	var verdicts []verdict
	fmt.Fprintf(b, "| case | metric | typedinformer |")
	for _, bl := range baselines {
		fmt.Fprintf(b, " %s |", bl.label)
	}
	for _, bl := range baselines {
		fmt.Fprintf(b, " × vs %s |", bl.label)
	}
	fmt.Fprintf(b, " target | result |\n|---|---|---:|%s%s---|---|\n",
		strings.Repeat("---:|", len(baselines)), strings.Repeat("---:|", len(baselines)))
	for _, c := range cases {
		for _, mt := range sc.metrics {
			value := func(lib string) (float64, bool) {
				v, ok := r.median(c.names[lib], mt.unit)
				if !ok || !mt.lessInput {
					return v, ok
				}
				in, okIn := r.median(c.names[alone], mt.unit)
				if !okIn || in < 1 { // the input costs (next to) nothing: the line would repeat the totals
					return 0, false
				}
				return v - in, true
			}
			ti, okTI := value(ours)
			values := []string{"—"}
			if okTI {
				values[0] = mt.format(ti)
			}
			found := okTI
			var ratios []string
			compared, met := 0, 0
			for _, bl := range baselines {
				cg, ok := value(bl.lib)
				text, ratioText := "—", "—"
				if ok {
					found = true
					text = mt.format(cg)
				}
				if ok && okTI && !mt.noRatio {
					x := ratio(mt, ti, cg)
					ratioText = formatRatio(x)
					if !math.IsNaN(x) {
						compared++
						if x >= mt.target {
							met++
						}
					}
				}
				values = append(values, text)
				ratios = append(ratios, ratioText)
			}
			if !found {
				continue
			}
			result := ""
			if mt.target > 0 {
				switch {
				case compared == 0:
					result = "n/a"
				case met == compared:
					result = "pass"
				default:
					result = "miss"
				}
				verdicts = append(verdicts, verdict{scenario: sc.title, cas: caseText(c.params), target: mt.targetText, ratios: ratios, result: result})
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", caseText(c.params), mt.label,
				strings.Join(values, " | "), strings.Join(ratios, " | "), mt.targetText, mark(result))
		}
	}
	fmt.Fprintf(b, "\n")
	if sc.flat {
		verdicts = append(verdicts, renderFlat(b, r, sc, cases)...)
	}
	if sc.ceiling {
		renderCeiling(b, r, sc, cases)
	}
	if sc.notes != "" {
		fmt.Fprintf(b, "%s\n\n", sc.notes)
	}
	return verdicts
}

// renderFlat compares the heap growth of the first and the last case (fewest and most
// events): flat means that ten times the events cost at most 1 MB or 10% more heap.
func renderFlat(b *strings.Builder, r *results, sc scenario, cases []benchCase) []verdict {
	if len(cases) < 2 {
		return nil
	}
	first, last := cases[0], cases[len(cases)-1]
	fmt.Fprintf(b, "Heap growth from *%s* to *%s*:\n\n", caseText(first.params), caseText(last.params))
	fmt.Fprintf(b, "| library | %s | %s | difference | target | result |\n|---|---:|---:|---:|---|---|\n",
		caseText(first.params), caseText(last.params))
	var verdicts []verdict
	libs := []baseline{{lib: ours, label: ours}}
	libs = append(libs, baselines...)
	for _, lib := range libs {
		lo, ok1 := r.median(first.names[lib.lib], "heap-MB")
		hi, ok2 := r.median(last.names[lib.lib], "heap-MB")
		if !ok1 || !ok2 {
			continue
		}
		diff := hi - lo
		target, result := "", ""
		if lib.lib == ours {
			target = "flat (+≤ 1 MB or +≤ 10%)"
			result = "miss"
			if diff <= math.Max(1, 0.1*math.Abs(lo)) {
				result = "pass"
			}
			ratios := make([]string, len(baselines))
			for i := range ratios {
				ratios[i] = "—"
			}
			verdicts = append(verdicts, verdict{scenario: sc.title, cas: caseText(first.params) + " → " + caseText(last.params),
				target: "flat heap", ratios: ratios, result: result})
		}
		fmt.Fprintf(b, "| %s | %s | %s | %+.1f MB | %s | %s |\n", lib.label, megabytes(lo), megabytes(hi), diff, target, mark(result))
	}
	fmt.Fprintf(b, "\n")
	return verdicts
}

// renderCeiling puts each library's events/s next to the input's own rate: the same
// stream through the same in-memory watch into a goroutine that only reads it, and the
// input's own allocations per event, which every library's figures include.
func renderCeiling(b *strings.Builder, r *results, sc scenario, cases []benchCase) {
	var rate metric
	for _, mt := range sc.metrics {
		if mt.rate && mt.target > 0 {
			rate = mt
		}
	}
	header := false
	for _, c := range cases {
		top, ok := r.median(c.names[alone], rate.unit)
		if !ok || top == 0 {
			continue
		}
		ti, okTI := r.median(c.names[ours], rate.unit)
		if !okTI {
			continue
		}
		share := func(v float64) string { return fmt.Sprintf("%s (%.0f%%)", rate.format(v), 100*v/top) }
		cells := []string{share(ti)}
		fastest := 0.0 // the faster client-go informer's rate
		for _, bl := range baselines {
			cg, ok := r.median(c.names[bl.lib], rate.unit)
			if !ok {
				cells = append(cells, "—")
				continue
			}
			cells = append(cells, share(cg))
			fastest = math.Max(fastest, cg)
		}
		if fastest == 0 {
			continue
		}
		allocs, cpu := "—", "—"
		if v, ok := r.median(c.names[alone], "allocs/event"); ok {
			allocs = decimal(v)
			if bytes, ok := r.median(c.names[alone], "B/event"); ok {
				allocs += " (" + byteSize(bytes) + ")"
			}
		}
		if v, ok := r.median(c.names[alone], "cpu-ns/event"); ok {
			cpu = nanos(v)
		}
		if !header {
			fmt.Fprintf(b, "The ceiling: the same stream through the same in-memory watch into a goroutine that only reads it "+
				"(*watch alone*), with the input's own allocations and CPU time per event, which every library's figures above "+
				"include. No library can go faster; %s of the faster client-go informer's rate is the target.\n\n", rate.targetText)
			fmt.Fprintf(b, "| case | watch alone | input allocs/event | input CPU time/event | typedinformer |")
			for _, bl := range baselines {
				fmt.Fprintf(b, " %s |", bl.label)
			}
			fmt.Fprintf(b, " target rate (%.0f× the faster client-go) |\n|---|---:|---:|---:|---:|%s---:|\n",
				rate.target, strings.Repeat("---:|", len(baselines)))
			header = true
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", caseText(c.params), rate.format(top), allocs, cpu,
			strings.Join(cells, " | "), share(rate.target*fastest))
	}
	if header {
		fmt.Fprintf(b, "\n")
	}
}

func caseText(params string) string {
	parts := strings.Split(params, "/")
	for i, p := range parts {
		if k, v, ok := strings.Cut(p, "="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				v = count(float64(n))
			}
			parts[i] = k + "=" + v
		}
	}
	return strings.Join(parts, ", ")
}

func mark(result string) string {
	switch result {
	case "pass":
		return "✅ pass"
	case "miss":
		return "❌ miss"
	}
	return result
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func formatRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r)
}

// count formats a number with thousands separators and no decimals.
func count(v float64) string {
	s := strconv.FormatInt(int64(math.Round(math.Abs(v))), 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if v < 0 {
		return "-" + string(out)
	}
	return string(out)
}

// decimal formats a small number with three significant digits, a large one with
// thousands separators.
func decimal(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return count(v)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a == 0:
		return "0"
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func byteSize(v float64) string { return decimal(v) + " B" }

func megabytes(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " MB" }

// nanos formats a duration given in nanoseconds.
func nanos(v float64) string {
	switch {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 2, 64) + " s"
	case v >= 1e6:
		return decimal(v/1e6) + " ms"
	case v >= 1e4:
		return decimal(v/1e3) + " µs"
	default:
		return decimal(v) + " ns"
	}
}

// shardTarget is the target for 4 replicas: at least 3.2 times the keys/s of one.
const (
	shardTarget         = 3.2
	shardTargetReplicas = "replicas=4"
)

// renderShardedReconcile writes the throughput of each number of replicas, its ratio to
// one replica, and the target at 4 replicas.
func renderShardedReconcile(b *strings.Builder, r *results, cases []benchCase) []verdict {
	name := func(c benchCase) string { return c.names[""] }
	one, oneKeys := 0.0, 0.0 // keys/s and keys of one replica
	for _, c := range cases {
		if c.params == "replicas=1" {
			one, _ = r.median(name(c), "keys/s")
			oneKeys, _ = r.median(name(c), "max-keys")
		}
	}
	get := func(c benchCase, unit string, format func(float64) string) string {
		if v, ok := r.median(name(c), unit); ok {
			return format(v)
		}
		return "—"
	}
	fmt.Fprintf(b, "| case | keys/s | × vs 1 replica | bound from balance | target | result | busiest replica: shards, keys | "+
		"reconcile | workers busy | process CPU | stream keys/s | write (1,000 changes) | settled in |\n")
	fmt.Fprintf(b, "|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	var verdicts []verdict
	for _, c := range cases {
		keys, ok := r.median(name(c), "keys/s")
		ratio, bound := "—", "—"
		x := math.NaN()
		if ok && one > 0 {
			x = keys / one
			ratio = formatRatio(x)
		}
		if mk, ok := r.median(name(c), "max-keys"); ok && mk > 0 && oneKeys > 0 {
			bound = formatRatio(oneKeys / mk)
		}
		target, result := "", ""
		if c.params == shardTargetReplicas {
			target = fmt.Sprintf("≥ %.1f× keys/s", shardTarget)
			switch {
			case math.IsNaN(x):
				result = "n/a"
			case x >= shardTarget:
				result = "pass"
			default:
				result = "miss"
			}
			verdicts = append(verdicts, verdict{scenario: "Sharding", cas: caseText(c.params), target: target,
				ratios: []string{ratio}, result: result, base: "1 replica"})
		}
		busiest := get(c, "max-shards", count) + ", " + get(c, "max-keys", count)
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", caseText(c.params),
			get(c, "keys/s", count), ratio, bound, target, mark(result), busiest,
			get(c, "reconcile-ms", func(v float64) string { return nanos(v * 1e6) }),
			get(c, "worker-busy", percent), get(c, "cpu-share", percent),
			get(c, "stream-keys/s", count),
			get(c, "write-ms", func(v float64) string { return nanos(v * 1e6) }),
			get(c, "settle-s", func(v float64) string { return nanos(v * 1e9) }))
	}
	fmt.Fprintf(b, "\n")
	for _, c := range cases {
		if v, ok := r.median(name(c), "server-filtered"); ok && v < 1 {
			fmt.Fprintf(b, "**The API server did not apply the shard selectors** (%s): every shard's cache received "+
				"every ConfigMap and filtered it on the client.\n\n", caseText(c.params))
		}
	}
	return verdicts
}

// renderShardHandOver writes the hand-over times of each way of leaving, against the
// lease duration.
func renderShardHandOver(b *strings.Builder, r *results, cases []benchCase) []verdict {
	fmt.Fprintf(b, "| case | lease | shards moved | first reconcile of a moved shard: median, max | "+
		"change reconciled by the new owner: median, max | longest ÷ lease |\n")
	fmt.Fprintf(b, "|---|---:|---:|---:|---:|---:|\n")
	for _, c := range cases {
		name := c.names[""]
		seconds := func(unit string) (string, float64) {
			if v, ok := r.median(name, unit); ok {
				return nanos(v * 1e9), v
			}
			return "—", math.NaN()
		}
		lease, leaseS := seconds("lease-s")
		firstMed, _ := seconds("first-median-s")
		firstMax, _ := seconds("first-max-s")
		med, _ := seconds("handover-median-s")
		longest, longestS := seconds("handover-max-s")
		moved := "—"
		if v, ok := r.median(name, "moved-shards"); ok {
			moved = count(v)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s, %s | %s, %s | %s |\n", caseText(c.params), lease, moved,
			firstMed, firstMax, med, longest, formatRatio(longestS/leaseS))
	}
	fmt.Fprintf(b, "\n")
	return nil
}

// percent formats a share as a percentage.
func percent(v float64) string { return strconv.FormatFloat(100*v, 'f', 0, 64) + "%" }
