package shard

import (
	"cmp"
	"slices"
)

// Assign gives each of n shards to one of members by rendezvous (highest random weight)
// hashing with a cap: every (shard, member) pair has a weight that depends on nothing
// else, and, from the heaviest pair down, a shard goes to the member of its pair unless
// it is taken or the member is full. A member is full at one shard above an even share,
// ceil(n/N)+1, or at ceil(1.5*n/N) if that is less. Every replica that sees the same
// members computes the same assignment; adding or removing one of N members moves about
// n/N shards, since the other pairs keep their weights. Duplicate and empty member names
// are ignored; the result maps each shard to its member, and is nil for no members.
func Assign(n int, members []string) []string {
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	members = slices.DeleteFunc(members, func(m string) bool { return m == "" })
	if len(members) == 0 || n <= 0 {
		return nil
	}
	type pair struct {
		weight        uint64
		shard, member int
	}
	pairs := make([]pair, 0, n*len(members))
	for m, name := range members {
		h := Hash(name)
		for s := range n {
			pairs = append(pairs, pair{weight: mix(h ^ mix(uint64(s))), shard: s, member: m})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(b.weight, a.weight), cmp.Compare(a.shard, b.shard), cmp.Compare(a.member, b.member))
	})
	limit := capacity(n, len(members))
	load := make([]int, len(members))
	owner := make([]string, n)
	left := n
	for _, p := range pairs {
		if owner[p.shard] != "" || load[p.member] == limit {
			continue
		}
		owner[p.shard] = members[p.member]
		load[p.member]++
		if left--; left == 0 {
			break
		}
	}
	return owner
}

// capacity is the most shards a member may hold: one more than an even share, so that a
// change of membership does not push shards along a chain of full members (with no
// slack, a member joining 7 others moved twice its share of 32 shards), within
// ceil(1.5*n/members).
func capacity(n, members int) int {
	even := (n + members - 1) / members
	return min(even+1, (3*n+2*members-1)/(2*members))
}

// mix is splitmix64's finalizer: it spreads the bits of x, so that the weights of one
// member for consecutive shards are unrelated.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
