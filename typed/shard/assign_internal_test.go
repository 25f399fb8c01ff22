package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// weight is the weight of the pair of shard and the member whose name hashes to h.
func weight(h uint64, shard int) uint64 { return mix(h ^ mix(uint64(shard))) }

// byPairs is Assign as its documentation says it: the n*N pairs sorted, heaviest first,
// and a shard to the member of its pair unless it is taken or the member is full.
func byPairs(n int, members []string) []string {
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	hashes := make([]uint64, len(members))
	for m, name := range members {
		hashes[m] = Hash(name)
	}
	limit := capacities(n, hashes)
	var pairs []pair
	for m, h := range hashes {
		for s := range n {
			pairs = append(pairs, pair{weight: weight(h, s), shard: s, member: m})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if lighter(a, b) {
			return 1
		}
		if lighter(b, a) {
			return -1
		}
		return 0
	})
	load := make([]int, len(members))
	owner := make([]string, n)
	for _, p := range pairs {
		if owner[p.shard] == "" && load[p.member] < limit[p.member] {
			owner[p.shard] = members[p.member]
			load[p.member]++
		}
	}
	return owner
}

// TestAssignIsTheHeaviestPairFirst checks that Assign's deferred acceptance gives what
// taking the pairs heaviest first gives, with each member's cap.
func TestAssignIsTheHeaviestPairFirst(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 3, 5, 8, 13, 16, 32, 100, 256} {
		for members := 1; members <= 40; members += 1 + members/4 {
			for range 5 {
				names := make([]string, members)
				for i := range names {
					names[i] = fmt.Sprintf("replica-%x", r.Uint64())
				}
				if got, want := Assign(n, names), byPairs(n, names); !slices.Equal(got, want) {
					t.Fatalf("%d shards, %d members: Assign = %v, heaviest pair first = %v", n, members, got, want)
				}
			}
		}
	}
}

// TestCapacitiesAddUpToTheShardsWithinTheCap checks that the caps let every shard be
// held, and that none is above ceil(n/N)+1 or ceil(1.5*n/N), also when the members'
// numbers fall badly.
func TestCapacitiesAddUpToTheShardsWithinTheCap(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for n := 1; n <= 70; n++ {
		for members := 1; members <= 70; members++ {
			for range 20 {
				hashes := make([]uint64, members)
				for i := range hashes {
					hashes[i] = r.Uint64()
				}
				limit := capacities(n, hashes)
				most := min((n+members-1)/members+1, (3*n+2*members-1)/(2*members))
				total := 0
				for _, l := range limit {
					if l < 1 || l > most {
						t.Fatalf("%d shards, %d members: a cap of %d", n, members, l)
					}
					total += l
				}
				if total < n {
					t.Fatalf("%d shards, %d members: caps add up to %d", n, members, total)
				}
			}
		}
	}
}
