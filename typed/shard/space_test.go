package shard_test

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/typed/shard"
)

// fnv64a is the reference FNV-1a 64 of s: the standard library's.
func fnv64a(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// refShard is the shard of s among shards (a power of two), computed from the standard
// library's hash and the definition of the ranges, not from package shard.
func refShard(s string, shards int) int {
	if shards == 1 {
		return 0
	}
	return int(fnv64a(s) >> (64 - bits.TrailingZeros(uint(shards))))
}

// randomUID returns a UID formatted as the API server formats them.
func randomUID(r *rand.Rand) types.UID {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

func TestHashIsFNV1a64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	inputs := []string{"", "a", "default", "object.metadata.uid", string(randomUID(r))}
	for range 1000 {
		b := make([]byte, r.IntN(80))
		for i := range b {
			b[i] = byte(r.Uint32()) // any byte, UTF-8 or not
		}
		inputs = append(inputs, string(b))
	}
	var got, want []uint64
	for _, s := range inputs {
		got = append(got, shard.Hash(s))
		want = append(want, fnv64a(s))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Hash differs from hash/fnv's New64a (-want +got):\n%s", diff)
	}
	// The published FNV-1a 64 values: the offset basis for "", and "a".
	if got, want := []uint64{shard.Hash(""), shard.Hash("a")}, []uint64{0xcbf29ce484222325, 0xaf63dc4c8601ec8c}; !cmp.Equal(got, want) {
		t.Errorf(`Hash(""), Hash("a") = %#x, want %#x`, got, want)
	}
}

func TestSpaceValidateAcceptsPowersOfTwoFromOneTo65536(t *testing.T) {
	for _, tc := range []struct {
		shards int
		valid  bool
	}{
		{-2, false}, {0, false}, {1, true}, {2, true}, {3, false}, {4, true}, {6, false},
		{1024, true}, {65535, false}, {65536, true}, {65537, false}, {131072, false}, {math.MaxInt, false},
	} {
		t.Run(fmt.Sprint(tc.shards), func(t *testing.T) {
			for _, by := range []shard.By{shard.ByUID, shard.ByNamespace} {
				err := shard.Space{Shards: tc.shards, By: by}.Validate()
				if tc.valid && err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				if !tc.valid && !errors.Is(err, shard.ErrShards) {
					t.Errorf("Validate() = %v, want an error wrapping ErrShards", err)
				}
			}
		})
	}
}

func TestOfHashPutsEachRangeStartInItsShardAndTheHashBeforeInThePreviousOne(t *testing.T) {
	for _, shards := range []int{1, 2, 4, 32, 1024, 65536} {
		t.Run(fmt.Sprint(shards), func(t *testing.T) {
			space := shard.Space{Shards: shards}
			width := new(big.Int).Div(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(int64(shards)))
			type placed struct {
				Hash  uint64
				Shard int
			}
			var got, want []placed
			add := func(h uint64, shard int) {
				got = append(got, placed{h, space.OfHash(h)})
				want = append(want, placed{h, shard})
			}
			add(0, 0)
			add(math.MaxUint64, shards-1)
			for _, i := range []int{1, 2, shards / 2, shards - 1, shards / 3} {
				if i <= 0 || i >= shards {
					continue
				}
				start := new(big.Int).Mul(width, big.NewInt(int64(i))).Uint64() // i*2^64/S
				add(start, i)
				add(start-1, i-1)
				add(start+width.Uint64()/2, i)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("OfHash (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOfHashesTheUIDOrTheNamespace(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	type placed struct{ Namespace, UID string }
	var objs []placed
	for i := range 200 {
		objs = append(objs, placed{fmt.Sprintf("team-%d", i%13), string(randomUID(r))})
	}
	for _, shards := range []int{1, 2, 8, 64} {
		for _, by := range []shard.By{shard.ByUID, shard.ByNamespace} {
			t.Run(fmt.Sprintf("%d by %v", shards, by), func(t *testing.T) {
				space := shard.Space{Shards: shards, By: by}
				var got, want []int
				for _, o := range objs {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: "x", UID: types.UID(o.UID)}}
					got = append(got, space.Of(cm))
					if by == shard.ByNamespace {
						want = append(want, refShard(o.Namespace, shards))
					} else {
						want = append(want, refShard(o.UID, shards))
					}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Of (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestByNamesTheFieldItHashes(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "n", UID: "u-1"}}
	type names struct{ Field, String, Value string }
	got := []names{
		{shard.ByUID.Field(), shard.ByUID.String(), shard.ByUID.Value(cm)},
		{shard.ByNamespace.Field(), shard.ByNamespace.String(), shard.ByNamespace.Value(cm)},
	}
	want := []names{
		{"object.metadata.uid", "uid", "u-1"},
		{"object.metadata.namespace", "namespace", "ns"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSelectorMergesRunsOfShardsIntoRanges(t *testing.T) {
	const (
		uid       = "shardRange(object.metadata.uid, "
		namespace = "shardRange(object.metadata.namespace, "
	)
	for _, tc := range []struct {
		name   string
		space  shard.Space
		shards []int
		want   string
	}{
		{"no shards", shard.Space{Shards: 4}, nil, ""},
		{"only shards out of range", shard.Space{Shards: 4}, []int{-1, 4, 9}, ""},
		{"all shards", shard.Space{Shards: 4}, []int{0, 1, 2, 3}, ""},
		{"all shards, unordered and repeated", shard.Space{Shards: 4}, []int{3, 1, 1, 0, 2, 3}, ""},
		{"the only shard", shard.Space{Shards: 1}, []int{0}, ""},
		{"the first shard", shard.Space{Shards: 4}, []int{0},
			uid + "'0x0000000000000000', '0x4000000000000000')"},
		{"the last shard ends at 2^64", shard.Space{Shards: 4}, []int{3},
			uid + "'0xc000000000000000', '0x10000000000000000')"},
		{"the second half", shard.Space{Shards: 2}, []int{1},
			uid + "'0x8000000000000000', '0x10000000000000000')"},
		{"a run of two", shard.Space{Shards: 4}, []int{1, 0},
			uid + "'0x0000000000000000', '0x8000000000000000')"},
		{"two separate shards", shard.Space{Shards: 4}, []int{2, 0},
			uid + "'0x0000000000000000', '0x4000000000000000') || " + uid + "'0x8000000000000000', '0xc000000000000000')"},
		{"duplicates and shards out of range ignored", shard.Space{Shards: 4}, []int{2, 0, 2, -1, 4, 7},
			uid + "'0x0000000000000000', '0x4000000000000000') || " + uid + "'0x8000000000000000', '0xc000000000000000')"},
		{"runs merged, the last to the end", shard.Space{Shards: 8}, []int{7, 1, 2, 3, 5, 6},
			uid + "'0x2000000000000000', '0x8000000000000000') || " + uid + "'0xa000000000000000', '0x10000000000000000')"},
		{"all but one", shard.Space{Shards: 4}, []int{0, 1, 3},
			uid + "'0x0000000000000000', '0x8000000000000000') || " + uid + "'0xc000000000000000', '0x10000000000000000')"},
		{"by namespace", shard.Space{Shards: 4, By: shard.ByNamespace}, []int{1},
			namespace + "'0x4000000000000000', '0x8000000000000000')"},
		{"one of 65536", shard.Space{Shards: 65536}, []int{1},
			uid + "'0x0001000000000000', '0x0002000000000000')"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.space.Selector(tc.shards)); diff != "" {
				t.Errorf("Selector(%v) (-want +got):\n%s", tc.shards, diff)
			}
		})
	}
}

// shardRange matches one range of a selector and captures its field and bounds.
var shardRange = regexp.MustCompile(`^shardRange\((object\.metadata\.(?:uid|namespace)), '(0x[0-9a-f]{16,17})', '(0x[0-9a-f]{16,17})'\)$`)

// parseRange returns the field and bounds of a selector of one range; hi is 2^64 for the
// end of the space.
func parseRange(t *testing.T, selector string) (field string, lo, hi *big.Int) {
	t.Helper()
	m := shardRange.FindStringSubmatch(selector)
	if m == nil {
		t.Fatalf("%q is not one shardRange", selector)
	}
	lo, _ = new(big.Int).SetString(m[2], 0)
	hi, _ = new(big.Int).SetString(m[3], 0)
	return m[1], lo, hi
}

func TestEachShardsSelectorHoldsExactlyTheObjectsOfPutsInIt(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, shards := range []int{2, 8, 64} {
		for _, by := range []shard.By{shard.ByUID, shard.ByNamespace} {
			t.Run(fmt.Sprintf("%d by %v", shards, by), func(t *testing.T) {
				space := shard.Space{Shards: shards, By: by}
				type bounds struct{ lo, hi *big.Int }
				ranges := make([]bounds, shards)
				for i := range shards {
					field, lo, hi := parseRange(t, space.Selector([]int{i}))
					if field != by.Field() {
						t.Fatalf("shard %d selects on %s, want %s", i, field, by.Field())
					}
					ranges[i] = bounds{lo, hi}
				}
				for range 500 {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", r.Uint64()), Name: "x", UID: randomUID(r)}}
					h := new(big.Int).SetUint64(fnv64a(by.Value(cm)))
					var in []int // the shards whose range holds the hash
					for i, b := range ranges {
						if b.lo.Cmp(h) <= 0 && h.Cmp(b.hi) < 0 {
							in = append(in, i)
						}
					}
					if diff := cmp.Diff([]int{space.Of(cm)}, in); diff != "" {
						t.Fatalf("%s %q: the shards whose selector holds it (-Of +selectors):\n%s", by, by.Value(cm), diff)
					}
				}
			})
		}
	}
}

// The selector of two of four shards by namespace: the second shard, and the last one,
// which ends at 2^64.
func ExampleSpace_Selector() {
	space := shard.Space{Shards: 4, By: shard.ByNamespace}
	fmt.Println(space.Selector([]int{1, 3}))
	fmt.Printf("%q\n", space.Selector([]int{0, 1, 2, 3})) // every shard: no selector
	// Output:
	// shardRange(object.metadata.namespace, '0x4000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')
	// ""
}
