package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/typedinformer/typedinformer/event"
)

// printer prints event lines as they arrive. When brief, it keeps each phase short: it
// prints the first head lines of a phase, keeps only the last tail of the rest, and when
// the phase ends prints how many it skipped and then those last lines.
type printer struct {
	out   io.Writer
	brief bool

	mu         sync.Mutex
	phase      string
	head, tail int
	printed    int      // lines of this phase printed so far
	ring       []string // the newest lines after the head, at most tail of them
	skipped    int      // lines dropped from ring
}

func newPrinter(out io.Writer, brief bool) *printer { return &printer{out: out, brief: brief} }

// startPhase begins a phase that, when brief, prints at most head lines and then the
// last tail ones.
func (p *printer) startPhase(name string, head, tail int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.head, p.tail, p.printed, p.ring, p.skipped = name, head, tail, 0, nil, 0
	fmt.Fprintf(p.out, "── %s ──\n", name)
}

func (p *printer) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.brief || p.printed < p.head {
		fmt.Fprintln(p.out, s)
		p.printed++
		return
	}
	p.ring = append(p.ring, s)
	if len(p.ring) > p.tail {
		p.ring = p.ring[1:]
		p.skipped++
	}
}

// endPhase prints what the phase held back.
func (p *printer) endPhase() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.skipped > 0 {
		fmt.Fprintf(p.out, "           ... %d more %s events, not shown ...\n", p.skipped, p.phase)
	}
	for _, s := range p.ring {
		fmt.Fprintln(p.out, s)
	}
	p.ring, p.skipped = nil, 0
}

// formatEvent renders one event as one line: time since the controller started, type
// (with /sync for events from a list and /final-state-unknown for deletions inferred by
// a relist), key, resource version and what changed.
func formatEvent(offset time.Duration, key string, e event.Event[*corev1.ConfigMap]) string {
	kind := e.Type.String()
	if e.Sync {
		kind += "/sync"
	}
	if e.FinalStateUnknown {
		kind += "/final-state-unknown"
	}
	var what string
	switch e.Type {
	case event.Added:
		what = plural(len(e.Object.Data), "data key")
	case event.Modified:
		if e.HasPrior() {
			what = diffData(e.Prior.Data, e.Object.Data)
		} else {
			what = "(prior state unknown)"
		}
	case event.Deleted:
		if e.HasPrior() {
			what = "last known rv=" + e.Prior.ResourceVersion
		}
	}
	return fmt.Sprintf("%+9.3fs  %-13s %s  rv=%s  %s", offset.Seconds(), kind, key, e.Object.ResourceVersion, what)
}

// diffData describes how a ConfigMap's data changed: "+key=value" for added keys,
// "-key" for removed ones and "key: old→new" for changed ones, in key order.
func diffData(old, cur map[string]string) string {
	keys := make([]string, 0, len(old)+len(cur))
	for k := range old {
		keys = append(keys, k)
	}
	for k := range cur {
		if _, ok := old[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		o, inOld := old[k]
		n, inCur := cur[k]
		switch {
		case !inOld:
			parts = append(parts, "+"+k+"="+short(n))
		case !inCur:
			parts = append(parts, "-"+k)
		case o != n:
			parts = append(parts, k+": "+short(o)+"→"+short(n))
		}
	}
	if len(parts) == 0 {
		return "data unchanged (metadata only)"
	}
	return strings.Join(parts, ", ")
}

// short quotes a value compactly, cut to a few characters.
func short(s string) string {
	const max = 14
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	if strings.ContainsAny(s, " ,=→") || s == "" {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// plural returns "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
