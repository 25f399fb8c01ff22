package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/typedinformer/typedinformer/internal/demo/democluster"
)

// summary prints what the replicas reported and what the record shows; it returns an
// error if a key was reconciled by two replicas at once or a change was never reconciled.
func (sh *show) summary(cl *democluster.Cluster) error {
	at := func(t time.Time) string { return fmt.Sprintf("%.1fs", t.Sub(sh.table.start).Seconds()) }
	fmt.Println()
	fmt.Println("summary")
	fmt.Printf("  cluster     %s\n", cl.Describe)

	var perReplica []string
	for _, name := range sh.order {
		perReplica = append(perReplica, fmt.Sprintf("%s %d", name, sh.rec.count(name).Load()))
	}
	fmt.Printf("  reconciles  %s\n", strings.Join(perReplica, ", "))

	var first, total []string
	for _, name := range []string{"replica-1", "replica-2", "replica-3"} {
		first = append(first, fmt.Sprintf("%s %d", name, sh.bytes[name]/1024))
	}
	for _, name := range sh.order {
		total = append(total, fmt.Sprintf("%s %d", name, sh.replicas[name].BytesReceived()/1024))
	}
	fmt.Printf("  received    KB, once the first 3 had settled (lists, watches, Leases): %s\n", strings.Join(first, ", "))
	fmt.Printf("              where a List of all %d ConfigMaps is %d KB; by the end: %s\n", len(sh.keys), sh.listBytes/1024, strings.Join(total, ", "))
	if sh.filters {
		fmt.Printf("              (without the server's filtering, each shard's list would carry all %d: a replica holding 10 shards\n", len(sh.keys))
		fmt.Printf("              would receive %d KB for its lists alone)\n", 10*sh.listBytes/1024)
	}

	end := sh.ended
	_, startMoves := sh.rec.between(sh.table.start, sh.kill.at)
	killHandOvers, killMoves := sh.rec.between(sh.kill.at, sh.join.at)
	joinHandOvers, joinMoves := sh.rec.between(sh.join.at, end)
	fmt.Printf("  kill        replica-2 killed at %s; replica-1 and replica-3 held all %d shards %s later (Leases of %s)\n",
		at(sh.kill.at), shards, sh.kill.settled.Sub(sh.kill.at).Round(10*time.Millisecond), leaseDuration)
	fmt.Printf("              %d shards moved; hand-over %s\n", killMoves, handOverStats(killHandOvers))
	fmt.Println("              (the survivors decide once replica-2's member Lease has gone unrenewed for a lease duration,")
	fmt.Println("              as seen from their own clocks, and take over its shards' Leases, unrenewed as long, at once)")
	fmt.Printf("  join        replica-4 added at %s; the shards settled %s later\n",
		at(sh.join.at), sh.join.settled.Sub(sh.join.at).Round(10*time.Millisecond))
	fmt.Printf("              %d shards moved; hand-over %s\n", joinMoves, handOverStats(joinHandOvers))
	fmt.Printf("  moves       %d in all: %d at the start, %d after the kill, %d after the join (shards gained, from shard.Metrics)\n",
		startMoves+killMoves+joinMoves, startMoves, killMoves, joinMoves)
	fmt.Println("              hand-over: from a replica deciding to take a shard to its first reconcile there (shard.Metrics.HandOver)")
	if n := sh.replicas["replica-2"].errors.Load(); n > 0 {
		fmt.Printf("              replica-2 logged %d errors once killed (not shown): it could reach nothing, as intended\n", n)
	}

	var errs []error
	missed, slowest := sh.rec.unreconciled()
	seen, _ := sh.rec.log.Seen()
	changes, reconciles := len(seen)+len(missed), len(sh.rec.log.Reconciles())
	if len(missed) == 0 {
		fmt.Printf("  changes     %d written during the run, every one reconciled, the slowest %s after it was written\n",
			changes, slowest.Round(10*time.Millisecond))
	} else {
		fmt.Printf("  changes     %d written during the run, %d never reconciled, first: %s version %d\n",
			changes, len(missed), missed[0].Key, missed[0].Version)
		errs = append(errs, fmt.Errorf("%d changes were never reconciled", len(missed)))
	}
	if o := sh.rec.log.Overlaps(); len(o) == 0 {
		fmt.Printf("  exclusive   no key was reconciled by two replicas at once (%d reconciles checked)\n", reconciles)
	} else {
		fmt.Printf("  exclusive   %d reconciles overlapped with another replica's of the same key, first: %s\n", len(o), o[0])
		errs = append(errs, fmt.Errorf("%d reconciles overlapped", len(o)))
	}
	return errors.Join(errs...)
}

// handOverStats returns the median and the maximum of sorted hand-over times.
func handOverStats(hs []time.Duration) string {
	if len(hs) == 0 {
		return "times: none reported"
	}
	return fmt.Sprintf("median %s, max %s", hs[len(hs)/2].Round(time.Millisecond), hs[len(hs)-1].Round(time.Millisecond))
}
