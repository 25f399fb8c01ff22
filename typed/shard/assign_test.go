package shard_test

import (
	"fmt"
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
