package event

import (
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// KeyFunc returns the cache key of an object. It returns an error, never panics, for an
// object that cannot have a key.
type KeyFunc[T Object] func(obj T) (string, error)

// ObjectKey is the default KeyFunc: "namespace/name" for namespaced objects and "name" for
// cluster-scoped ones, the same keys client-go's MetaNamespaceKeyFunc produces. It
// returns an error wrapping ErrNilObject or ErrNoName for objects that cannot be keyed.
func ObjectKey[T Object](obj T) (string, error) {
	var zero T
	if obj == zero {
		return "", fmt.Errorf("cannot compute key: %w", ErrNilObject)
	}
	name := obj.GetName()
	if name == "" {
		return "", fmt.Errorf("cannot compute key for %T in namespace %q: %w", obj, obj.GetNamespace(), ErrNoName)
	}
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + name, nil
	}
	return name, nil
}

// SplitKey splits a key made by ObjectKey into its namespace (empty for cluster-scoped
// objects) and name.
func SplitKey(key string) (namespace, name string) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}

// NotNewer reports whether next is the same state as prior or an older one, judged by
// resource version. Resource versions are opaque in general, so they are compared only
// when both are decimal integers (as etcd-backed servers produce); otherwise next counts
// as newer. The pipeline uses it to never replace a state with an older one.
func NotNewer[T Object](prior, next T) bool {
	return notNewer(prior.GetResourceVersion(), next.GetResourceVersion())
}

// Version returns rv as an integer when it is a canonical decimal (1 to 19 digits, no
// leading zero), the resource versions NotNewer compares without parsing; ok is false
// for any other. For two canonical resource versions a and b, NotNewer's answer is
// Version(b) <= Version(a), so a caller that keeps the Version of the state it holds can
// judge a new state without reading the old one.
func Version(rv string) (v uint64, ok bool) {
	if !canonical(rv) {
		return 0, false
	}
	for i := 0; i < len(rv); i++ {
		v = v*10 + uint64(rv[i]-'0')
	}
	return v, true
}

// notNewer compares two resource versions as NotNewer says. It runs for every event, so
// the usual case, two canonical decimals (no sign, no leading zero, under 20 digits,
// hence below 2^64), compares the strings by length and then bytes, without parsing.
func notNewer(prior, next string) bool {
	if canonical(prior) && canonical(next) {
		if len(next) != len(prior) {
			return len(next) < len(prior)
		}
		return next <= prior
	}
	p, err1 := strconv.ParseUint(prior, 10, 64)
	n, err2 := strconv.ParseUint(next, 10, 64)
	return err1 == nil && err2 == nil && n <= p
}

// canonical reports whether s is a decimal of 1 to 19 digits without a leading zero.
func canonical(s string) bool {
	if len(s) == 0 || len(s) > 19 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// OtherObject reports whether a and b are different objects (by UID) of the same name:
// one was deleted and the other created under its name. Objects without a UID are taken
// to be the same.
func OtherObject(a, b metav1.Object) bool {
	ua, ub := a.GetUID(), b.GetUID()
	return ua != "" && ub != "" && ua != ub
}

// UIDNote returns the 16 bytes of uid when it is a UUID in the canonical form the API
// server assigns (36 characters: lower-case hex digits in groups of 8-4-4-4-12), so that
// a caller that keeps the note of the object it holds tells a different object by
// comparing notes, without reading the old object: two such UIDs are equal exactly when
// their notes are. ok is false for any other UID, and for the nil UUID, whose note would
// be the zero value that means "no note".
func UIDNote(uid types.UID) (note [16]byte, ok bool) {
	if len(uid) != 36 {
		return note, false
	}
	u := (*[36]byte)([]byte(uid)) // read only: no copy; an array, so the indices below are not checked
	if u[8] != '-' || u[13] != '-' || u[18] != '-' || u[23] != '-' {
		return note, false
	}
	var bad byte
	pair := func(j, i int) {
		hi, lo := hexValue[u[i]], hexValue[u[i+1]]
		bad |= hi | lo
		note[j] = hi<<4 | lo&0xf
	}
	pair(0, 0)
	pair(1, 2)
	pair(2, 4)
	pair(3, 6)
	pair(4, 9)
	pair(5, 11)
	pair(6, 14)
	pair(7, 16)
	pair(8, 19)
	pair(9, 21)
	pair(10, 24)
	pair(11, 26)
	pair(12, 28)
	pair(13, 30)
	pair(14, 32)
	pair(15, 34)
	if bad&0xf0 != 0 {
		return [16]byte{}, false
	}
	return note, note != [16]byte{}
}

// hexValue holds the value of each lower-case hex digit, and 0xff for every other byte
// (upper case included: it would give two UIDs that differ as strings the same note).
var hexValue = func() (t [256]byte) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = byte(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()
