package shard_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/typed/shard"
)

func TestAssignGivesEveryShardToOneMemberWithinTheBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, shards := range []int{1, 2, 16, 32, 64, 256} {
		for members := 1; members <= 9; members++ {
			for trial := range 20 {
				names := randomNames(r, members, trial)
				owners := shard.Assign(shards, names)
				load := map[string]int{}
				for i, o := range owners {
					if !slices.Contains(names, o) {
						t.Fatalf("%d shards, %v: shard %d goes to %q, not a member", shards, names, i, o)
					}
					load[o]++
				}
				limit := min((shards+members-1)/members+1, (3*shards+2*members-1)/(2*members))
				for m, n := range load {
					if n > limit {
						t.Errorf("%d shards, %d members: %s holds %d, more than %d", shards, members, m, n, limit)
					}
				}
				if len(owners) != shards {
					t.Errorf("%d shards assigned, want %d", len(owners), shards)
				}
			}
		}
	}
}

func TestAssignIsTheSameWhateverTheOrderOfMembers(t *testing.T) {
	names := []string{"replica-a", "replica-b", "replica-c", "replica-d"}
	want := shard.Assign(32, names)
	for _, order := range [][]string{
		{"replica-d", "replica-c", "replica-b", "replica-a"},
		{"replica-b", "replica-d", "replica-a", "replica-c"},
		{"replica-b", "replica-d", "", "replica-a", "replica-c", "replica-b"}, // empty and duplicate names are ignored
	} {
		if diff := cmp.Diff(want, shard.Assign(32, order)); diff != "" {
			t.Errorf("Assign(32, %v) (-want +got):\n%s", order, diff)
		}
	}
	if got := shard.Assign(32, nil); got != nil {
		t.Errorf("Assign with no members = %v, want nil", got)
	}
}

// TestAssignMovesAboutAShareWhenOneMemberComesOrGoes checks that a member joining or
// leaving N others moves, on average, at most 1.5 times the shards that must move (the
// newcomer's share, or the leaver's), so that a change of membership reshuffles little.
func TestAssignMovesAboutAShareWhenOneMemberComesOrGoes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const trials = 200
	for _, shards := range []int{32, 64} {
		for members := 1; members <= 8; members++ {
			var joined, left float64
			for trial := range trials {
				names := randomNames(r, members+1, trial)
				before, after := shard.Assign(shards, names[:members]), shard.Assign(shards, names)
				joined += float64(moved(before, after))
				left += float64(moved(after, before))
			}
			share := float64(shards) / float64(members+1)
			joined /= trials
			left /= trials
			t.Logf("%d shards, %d members +1: %.1f moved on join, %.1f on leave, share %.1f", shards, members, joined, left, share)
			if joined > 1.5*share || left > 1.5*share {
				t.Errorf("%d shards, %d members +1: %.1f moved on join and %.1f on leave, more than 1.5 x %.1f", shards, members, joined, left, share)
			}
		}
	}
}

func moved(a, b []string) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func randomNames(r *rand.Rand, n, trial int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("replica-%d-%x", trial, r.Uint64())
	}
	return names
}

// gridShards and gridMembers sample the grid of the properties below: every power of two
// from 8 to 1024 shards and a few other counts, and member counts from 1 to 64 that take
// in, for each shard count, where the caps step: shares of more than 4 shards and of less
// than one, and caps of 1 to 6 shards between.
var (
	gridShards  = []int{8, 12, 16, 24, 32, 64, 100, 128, 256, 333, 512, 1024}
	gridMembers = []int{1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 15, 16, 20, 23, 24, 31, 32, 40, 47, 48, 56, 63}
)

// moveBound is the most that a member joining n-1 others, or leaving n, may move on
// average, as a multiple of the share that has to move, shards/n. It is 1.5 where members
// hold 4 shards or more on average (shards >= 4n) and are at most 12, or where every cap
// is one shard, before and after (2(n-1) >= 3*shards); 2.5 elsewhere, and that is the
// cost of the cap, min(ceil(S/N)+1, ceil(1.5*S/N)). As members join, the caps of one to
// 1.5 shares' worth of members fall by one per join (capacities), and each of them that
// holds its cap gives up a shard, to a member other than the newcomer; and a member that
// is full when the newcomer takes one of its shards takes back one it had left to
// another. Where caps are of 1 or 2 shards, members are often full: 1.9 to 2.2 times the
// share (64 shards and 48 members +1; 24 and 20; 32 and 32). No schedule of the caps tried
// did better than about 2 there: one cap for all, as the old Assign had, gives spikes (13
// times at 32 shards and 47 members +1); caps falling late in their step, caps following
// each member's own rendezvous load, a maximum-weight assignment instead of heaviest pair
// first all did worse. Where shares are large, one shard above an even share is a tight
// cap, and the more members, the more of them are full: about 1.25 times at 9 members,
// 1.45 at 12, 1.55 at 17, 1.9 at 64 (a cap of ceil(1.5*S/N) alone would keep these
// within 1.45).
func moveBound(shards, n int) float64 {
	if shards >= 4*n && n <= 12 || 2*(n-1) >= 3*shards {
		return 1.5
	}
	return 2.5
}

// TestAssignMovesAtMostTheBoundWhenAMemberJoinsOrLeaves checks, over the grid, that one
// member joining N others, or leaving N+1, moves on average at most moveBound times the
// share that has to move: S/(N+1) shards. That share is what the newcomer holds, or the
// leaver held, on average, whatever the assignment: every member is alike but for its
// random name, so each of the N+1 holds S/(N+1) on average, and all that the newcomer
// holds has moved to it (all that the leaver held moves away). A share below one shard is
// an average too: the newcomer takes one shard with probability S/(N+1).
//
// Each trial draws N+1 random names, counts the moves between Assign over the first N and
// over all N+1 (the last joins), and between Assign over all N+1 and over all but a random
// one (it leaves). A trial's moves, as a multiple of the share, vary by about
// 1.2/sqrt(share), so a cell runs up to 600/share trials (at least 10, at most 3000),
// which puts the average within about ±0.05 of its expectation; it stops, by 10 trials,
// as soon as both averages are 4 standard errors below the bound. The seeds are fixed, so
// that the test gives the same numbers every run.
func TestAssignMovesAtMostTheBoundWhenAMemberJoinsOrLeaves(t *testing.T) {
	for _, shards := range gridShards {
		t.Run(fmt.Sprint(shards), func(t *testing.T) {
			t.Parallel()
			worst, worstAt := 0.0, 0
			for _, members := range gridMembers {
				r := rand.New(rand.NewPCG(uint64(shards), uint64(members)))
				share := float64(shards) / float64(members+1)
				most := min(max(int(math.Ceil(600/share)), 10), 3000)
				b := moveBound(shards, members+1)
				var join, leave [2]float64 // sums of moves and of their squares
				trials := 0
				mean := func(sums [2]float64) (float64, float64) {
					n := float64(trials)
					mu := sums[0] / n
					return mu / share, math.Sqrt(max(0, sums[1]/n-mu*mu)/n) / share
				}
				var j, jerr, l, lerr float64
				for trials < most {
					names := randomNames(r, members+1, trials)
					all := shard.Assign(shards, names)
					m := float64(moved(shard.Assign(shards, names[:members]), all))
					join[0], join[1] = join[0]+m, join[1]+m*m
					i := r.IntN(members + 1)
					m = float64(moved(all, shard.Assign(shards, slices.Delete(names, i, i+1))))
					leave[0], leave[1] = leave[0]+m, leave[1]+m*m
					if trials++; trials%10 == 0 || trials == most {
						j, jerr = mean(join)
						l, lerr = mean(leave)
						if j+4*jerr < b && l+4*lerr < b {
							break
						}
					}
				}
				t.Logf("%4d shards, %2d members +1: moved %.2f (±%.2f) x the share %.2f on join, %.2f (±%.2f) on leave, bound %.1f, %d trials",
					shards, members, j, jerr, share, l, lerr, b, trials)
				if j > b || l > b {
					t.Errorf("%d shards, %d members +1: moved %.2f x the share %.2f on join and %.2f on leave, more than %.1f",
						shards, members, j, share, l, b)
				}
				if max(j, l) > worst {
					worst, worstAt = max(j, l), members
				}
			}
			t.Logf("worst for %d shards: %d members +1, %.2f x the share", shards, worstAt, worst)
		})
	}
}

// TestAssignKeepsEveryMemberWithinTheCap checks, over the grid, that every shard goes to
// one of the members and that none holds more than one shard above an even share,
// ceil(S/N)+1, nor ceil(1.5*S/N).
func TestAssignKeepsEveryMemberWithinTheCap(t *testing.T) {
	for _, shards := range gridShards {
		t.Run(fmt.Sprint(shards), func(t *testing.T) {
			t.Parallel()
			for _, members := range append(slices.Clone(gridMembers), 64) {
				r := rand.New(rand.NewPCG(uint64(shards), uint64(members)+100))
				limit := min((shards+members-1)/members+1, (3*shards+2*members-1)/(2*members))
				for trial := range 10 {
					names := randomNames(r, members, trial)
					owners := shard.Assign(shards, names)
					if len(owners) != shards {
						t.Fatalf("%d shards, %d members: %d owners", shards, members, len(owners))
					}
					load := map[string]int{}
					for i, o := range owners {
						if !slices.Contains(names, o) {
							t.Fatalf("%d shards, %v: shard %d goes to %q, not a member", shards, names, i, o)
						}
						load[o]++
					}
					for m, n := range load {
						if n > limit {
							t.Errorf("%d shards, %d members: %s holds %d, more than %d", shards, members, m, n, limit)
						}
					}
				}
			}
		})
	}
}

// TestAssignIsTheSameOnEveryReplica checks, over the grid, that Assign depends on the set
// of members only: every replica, which may list the members in any order, with
// duplicates and empty names, computes the same assignment.
func TestAssignIsTheSameOnEveryReplica(t *testing.T) {
	for _, shards := range gridShards {
		t.Run(fmt.Sprint(shards), func(t *testing.T) {
			t.Parallel()
			for _, members := range gridMembers {
				r := rand.New(rand.NewPCG(uint64(shards), uint64(members)+200))
				names := randomNames(r, members, 0)
				want := shard.Assign(shards, names)
				for range 3 {
					other := slices.Clone(names)
					r.Shuffle(len(other), func(i, j int) { other[i], other[j] = other[j], other[i] })
					other = append(other, other[r.IntN(len(other))], "")
					if got := shard.Assign(shards, other); !slices.Equal(got, want) {
						t.Fatalf("%d shards: Assign(%v) differs from Assign(%v) (-want +got):\n%s", shards, other, names, cmp.Diff(want, got))
					}
				}
			}
		})
	}
}
