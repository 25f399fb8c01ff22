package main

import (
	"bufio"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// results is what one go test -bench run printed.
type results struct {
	// samples maps a benchmark's full name, without the GOMAXPROCS suffix, to one map of
	// unit to value per run (-count).
	samples map[string][]map[string]float64
	// order is the benchmarks' names in the order they first appeared.
	order []string
	// skipped maps the name of a skipped benchmark to the reason it gave.
	skipped map[string]string
	// logs maps a benchmark's name to the lines it logged (b.Logf).
	logs map[string][]string
	// procs is the GOMAXPROCS the benchmarks ran with, from their names' suffix.
	procs int
}

var (
	procsSuffix = regexp.MustCompile(`-\d+$`)
	logPrefix   = regexp.MustCompile(`^\s+\S+\.go:\d+: `)
)

// parse reads go test -bench output: result lines ("BenchmarkX/a=b-2  1  5 ns/op  3 B/op"),
// and the "--- SKIP:" and "--- BENCH:" blocks with their indented log lines.
func parse(out string) (*results, error) {
	r := &results{
		samples: map[string][]map[string]float64{},
		skipped: map[string]string{},
		logs:    map[string][]string{},
	}
	var block, blockKind string // the benchmark whose indented lines follow
	s := bufio.NewScanner(strings.NewReader(out))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		switch {
		case strings.HasPrefix(line, "--- SKIP: "), strings.HasPrefix(line, "--- BENCH: "), strings.HasPrefix(line, "--- FAIL: "):
			kind, name, _ := strings.Cut(strings.TrimPrefix(line, "--- "), ": ")
			block, blockKind = procsSuffix.ReplaceAllString(strings.TrimSpace(name), ""), kind
			continue
		case block != "" && (strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")):
			msg := strings.TrimSpace(logPrefix.ReplaceAllString(line, ""))
			if blockKind == "SKIP" {
				if _, ok := r.skipped[block]; !ok {
					r.skipped[block] = msg
				}
			} else {
				r.logs[block] = append(r.logs[block], msg)
			}
			continue
		}
		block = ""
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 4 || len(fields)%2 != 0 {
			continue // a name whose run printed something in between, or no results
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue
		}
		name := procsSuffix.ReplaceAllString(fields[0], "")
		r.procs = 1
		if suffix := procsSuffix.FindString(fields[0]); suffix != "" {
			r.procs, _ = strconv.Atoi(suffix[1:])
		}
		sample := map[string]float64{}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark %s: value %q: %w", name, fields[i], err)
			}
			sample[fields[i+1]] = v
		}
		if _, ok := r.samples[name]; !ok {
			r.order = append(r.order, name)
		}
		r.samples[name] = append(r.samples[name], sample)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(r.samples) == 0 && len(r.skipped) == 0 {
		return nil, fmt.Errorf("no benchmark results")
	}
	return r, nil
}

// median returns the median of unit over the runs of name, and whether there was one.
func (r *results) median(name, unit string) (float64, bool) {
	var vs []float64
	for _, s := range r.samples[name] {
		if v, ok := s[unit]; ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2], true
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2, true
}

// runs returns how many runs of name there were.
func (r *results) runs(name string) int { return len(r.samples[name]) }

// benchCase is one row group of a scenario: the part of the benchmark names that is
// neither the top-level name nor the lib= element, such as "objects=1000".
type benchCase struct {
	params string
	// names maps a library ("typedinformer", "client-go") to its benchmark's full name.
	names map[string]string
}

// cases returns the cases of the top-level benchmark top, in the order they ran.
func (r *results) cases(top string) []benchCase {
	var out []benchCase
	index := map[string]int{}
	for _, name := range r.order {
		parts := strings.Split(name, "/")
		if parts[0] != top {
			continue
		}
		var params []string
		lib := ""
		for _, p := range parts[1:] {
			if v, ok := strings.CutPrefix(p, "lib="); ok {
				lib = v
			} else {
				params = append(params, p)
			}
		}
		key := strings.Join(params, "/")
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, benchCase{params: key, names: map[string]string{}})
		}
		out[i].names[lib] = name
	}
	return out
}

// skipReason returns why top, or one of its sub-benchmarks, was skipped, or "".
func (r *results) skipReason(top string) string {
	for name, reason := range r.skipped {
		if name == top || strings.HasPrefix(name, top+"/") {
			return reason
		}
	}
	return ""
}
