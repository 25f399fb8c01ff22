package shard

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// By names the field whose hash places an object in a shard, as the API server's shard
// selectors do (KEP-5866).
type By int

const (
	// ByUID spreads objects evenly, whatever their namespaces. A key's shard is then that
	// of its object, not of its name: an object deleted and created again under the same
	// name has a new UID, and so, often, another shard, whose replica may reconcile the
	// new object while the old one's replica still reconciles its deletion. Exclusivity
	// is per object (per UID) then, not per key: a reconciler whose deletion clean-up
	// acts by name must check that what it removes belongs to Request.LastKnown's UID
	// (owner references do), or the Space must be ByNamespace, where a key's shard never
	// changes.
	ByUID By = iota
	// ByNamespace keeps every object of a namespace in one shard, so that a primary and
	// the namespaced objects it owns or reads are held by the same replica. Shards are
	// ranges of the hash's high bits, which FNV-1a mixes the last bytes of a string into
	// poorly: namespaces whose names differ only at the end (team-1, team-2, ...) fall
	// into a few shards. UIDs, random, spread evenly.
	ByNamespace
)

// Field is the field path the API server's shardRange function takes.
func (b By) Field() string {
	if b == ByNamespace {
		return "object.metadata.namespace"
	}
	return "object.metadata.uid"
}

// String returns "uid" or "namespace".
func (b By) String() string {
	if b == ByNamespace {
		return "namespace"
	}
	return "uid"
}

// Value is the string of obj that is hashed: its UID or its namespace.
func (b By) Value(obj metav1.Object) string {
	if b == ByNamespace {
		return obj.GetNamespace()
	}
	return string(obj.GetUID())
}

// Hash is the 64-bit FNV-1a hash of s, the API server's hash for shard selectors.
// hash/fnv is not used: it allocates a hasher and a copy of s per call, on the path of
// every watch event.
func Hash(s string) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime64
	}
	return h
}

// ErrShards is returned, wrapped, for a number of shards that is not a power of two
// between 1 and 2^16.
var ErrShards = errors.New("the number of shards must be a power of two between 1 and 65536")

// Space divides the 64-bit hash space of one field into Shards equal ranges: shard i
// holds the hashes in [i*2^64/Shards, (i+1)*2^64/Shards).
type Space struct {
	// Shards is the number of shards, a power of two.
	Shards int
	// By is the field hashed.
	By By
}

// Validate returns an error wrapping ErrShards unless Shards is a power of two between 1
// and 65536.
func (s Space) Validate() error {
	if s.Shards < 1 || s.Shards > 1<<16 || s.Shards&(s.Shards-1) != 0 {
		return fmt.Errorf("%w: %d", ErrShards, s.Shards)
	}
	return nil
}

// shift is how far a hash is shifted right to give its shard; 64 for one shard, for
// which Go's shift gives 0.
func (s Space) shift() int { return 64 - bits.TrailingZeros(uint(s.Shards)) }

// OfHash returns the shard holding hash h.
func (s Space) OfHash(h uint64) int { return int(h >> s.shift()) }

// Of returns the shard of obj.
func (s Space) Of(obj metav1.Object) int { return s.OfHash(Hash(s.By.Value(obj))) }

// Selector returns the API server's shard selector (ListOptions.ShardSelector) for the
// given shards: one shardRange per run of consecutive shards, ORed with "||". It returns
// "" for no shards, and for every shard, since all objects are then selected. For a
// Space Validate refuses, it returns "" too; Filter refuses such a Space.
func (s Space) Selector(shards []int) string {
	if s.Shards < 1 {
		return "" // no valid Space; Validate says why
	}
	held := make([]bool, s.Shards)
	n := 0
	for _, i := range shards {
		if i >= 0 && i < s.Shards && !held[i] {
			held[i] = true
			n++
		}
	}
	if n == 0 || n == s.Shards {
		return ""
	}
	var ranges []string
	for i := 0; i < s.Shards; {
		if !held[i] {
			i++
			continue
		}
		j := i
		for j < s.Shards && held[j] {
			j++
		}
		ranges = append(ranges, fmt.Sprintf("shardRange(%s, '%s', '%s')", s.By.Field(), s.bound(i), s.bound(j)))
		i = j
	}
	return strings.Join(ranges, " || ")
}

// bound writes the first hash of shard i as the server wants it: 0x and 16 hex digits,
// or 0x10000000000000000 for the end of the space.
func (s Space) bound(i int) string {
	if i == s.Shards {
		return "0x10000000000000000"
	}
	return fmt.Sprintf("0x%016x", uint64(i)<<s.shift())
}
