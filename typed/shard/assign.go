package shard

import (
	"cmp"
	"math/bits"
	"slices"
)

// Assign gives each of n shards to one of members by rendezvous (highest random weight)
// hashing with a cap: every (shard, member) pair has a weight that depends on nothing
// else, and, from the heaviest pair down, a shard goes to the member of its pair unless it
// is taken or the member is full. Of N members, none holds more than one shard above an
// even share, ceil(n/N)+1, nor more than ceil(1.5*n/N): each may hold the integer part of
// X = min(n/N+1, 1.5*n/N), or one more, and at least one (see capacities). Every replica
// that sees the same members computes the same assignment, whatever their order;
// duplicate and empty member names are ignored; the result maps each shard to its member,
// and is nil for no members.
//
// A member joining N others takes n/(N+1) shards on average, and, since every other pair
// keeps its weight, few other shards move; a member leaving gives its shards to their next
// heaviest members. What moves more is the cap: a member that was full when the newcomer
// took a shard from it takes back one it had left to another, and a member whose cap
// falls while it is full gives one up. On average, a join into N+1 members or a leave
// from N+1 moves at most 1.5 times n/(N+1) shards when members hold 4 shards or more on
// average (n >= 4(N+1)) and number 12 or fewer (N+1 <= 12), or when every cap is one
// shard (N >= 1.5n); and at most 2.5 times otherwise, for up to 64 members (measured:
// 2.2 times at most where caps are of 1 or 2 shards, at 64 shards and 49 members; 1.9
// times at 512 or 1024 shards and 64 members, where one shard above an even share is a
// tight cap and many members are full).
func Assign(n int, members []string) []string {
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	members = slices.DeleteFunc(members, func(m string) bool { return m == "" })
	if len(members) == 0 || n <= 0 {
		return nil
	}
	hashes := make([]uint64, len(members))
	for m, name := range members {
		hashes[m] = Hash(name)
	}
	limit := capacities(n, hashes)
	// The heaviest pair first, with a cap, is found by deferred acceptance, which gives
	// the same assignment (pairs are ranked alike by their shard and their member: by
	// weight, then by shard and member) without sorting the n*N pairs: each shard goes
	// to its heaviest member not tried yet; a full member keeps its heaviest shards and
	// sends back the lightest, which tries its next heaviest member.
	owner := make([]int, n)
	tried := make([]pair, n)             // the pair each shard tried last
	held := make([][]pair, len(members)) // a heap per member, its lightest pair first
	room := 0
	for _, l := range limit {
		room += l
	}
	all := make([]pair, room)
	for m, l := range limit {
		held[m], all = all[:0:l], all[l:]
	}
	free := make([]int, 0, n)
	for s := n - 1; s >= 0; s-- {
		owner[s] = -1
		tried[s] = pair{weight: ^uint64(0), shard: s, member: -1}
		free = append(free, s)
	}
	for len(free) > 0 {
		s := free[len(free)-1]
		free = free[:len(free)-1]
		p := next(tried[s], hashes)
		tried[s] = p
		h := held[p.member]
		if len(h) < limit[p.member] {
			held[p.member] = push(h, p)
			owner[s] = p.member
			continue
		}
		if lighter(p, h[0]) {
			free = append(free, s) // the member keeps what it has
			continue
		}
		owner[h[0].shard] = -1
		free = append(free, h[0].shard)
		h[0] = p
		down(h)
		owner[s] = p.member
	}
	out := make([]string, n)
	for s, m := range owner {
		out[s] = members[m]
	}
	return out
}

// pair is a shard and a member, with the weight of the pair.
type pair struct {
	weight        uint64
	shard, member int
}

// lighter says whether a ranks below b: a lighter weight, or the same and a later shard
// or member.
func lighter(a, b pair) bool {
	return cmp.Or(cmp.Compare(a.weight, b.weight), cmp.Compare(b.shard, a.shard), cmp.Compare(b.member, a.member)) < 0
}

// next is the heaviest pair of last's shard that ranks below last: a lighter weight, or
// the same and a later member. A pair's weight is mix(h^mix(shard)), h the hash of the
// member's name.
func next(last pair, hashes []uint64) pair {
	best := pair{shard: last.shard, member: -1}
	s := mix(uint64(last.shard))
	for m, h := range hashes {
		w := mix(h ^ s)
		if (w < last.weight || w == last.weight && m > last.member) && (best.member < 0 || w > best.weight) {
			best.weight, best.member = w, m
		}
	}
	return best
}

// push adds p to h, a heap whose first pair is its lightest.
func push(h []pair, p pair) []pair {
	h = append(h, p)
	for i := len(h) - 1; i > 0; {
		up := (i - 1) / 2
		if !lighter(h[i], h[up]) {
			break
		}
		h[i], h[up] = h[up], h[i]
		i = up
	}
	return h
}

// down restores the heap h after its first pair was replaced.
func down(h []pair) {
	for i := 0; ; {
		least := i
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(h) && lighter(h[c], h[least]) {
				least = c
			}
		}
		if least == i {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}

// capacities gives each of N members the most shards of n it may hold: the integer part
// of X = min(n/N+1, 1.5*n/N), or one more, so never more than ceil(X), which is neither
// more than ceil(n/N)+1 nor ceil(1.5*n/N), and at least 1. A member holds one more while
// its own number u, uniform in [0, 1) and drawn from its name alone, is at least 1 minus
// the fractional part of X: its cap is floor(X+u). As members join and X falls, the
// members' caps fall one at a time, each at its own member count, rather than all at once
// where ceil(X) falls, where every member at the cap gave up a shard to a third member (8
// shards, 11 members joined by a twelfth: a cap of 2 for all became 1, and the join moved
// 3.5 times the newcomer's share). Should the caps add up to fewer than n (possible where
// X < 2), the members whose u is largest get one more first.
func capacities(n int, hashes []uint64) []int {
	members := len(hashes)
	x := min(2*n+2*members, 3*n) // 2*members*X
	whole, frac := x/(2*members), x%(2*members)
	limit := make([]int, members)
	order := make([]int, members)
	bucket := make([]uint64, members)
	total := 0
	for m, h := range hashes {
		// bucket = floor(u*2*members), and u >= 1-frac/(2*members) exactly when
		// bucket+frac >= 2*members.
		bucket[m], _ = bits.Mul64(mix(mix(h)+0x9e3779b97f4a7c15), uint64(2*members))
		limit[m] = whole
		if int(bucket[m])+frac >= 2*members {
			limit[m]++
		}
		limit[m] = max(limit[m], 1)
		total += limit[m]
		order[m] = m
	}
	if total >= n {
		return limit
	}
	most := whole
	if frac > 0 {
		most++
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(bucket[b], bucket[a]), cmp.Compare(a, b)) })
	for total < n {
		for _, m := range order {
			if total < n && limit[m] < most {
				limit[m]++
				total++
			}
		}
	}
	return limit
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
