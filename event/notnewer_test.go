package event

import (
	"strconv"
	"testing"
)

// notNewerByParsing is NotNewer's definition: both resource versions parse as unsigned
// decimals and next's is not greater.
func notNewerByParsing(prior, next string) bool {
	p, err1 := strconv.ParseUint(prior, 10, 64)
	n, err2 := strconv.ParseUint(next, 10, 64)
	return err1 == nil && err2 == nil && n <= p
}

func TestNotNewerComparesDecimalResourceVersionsAndNothingElse(t *testing.T) {
	for _, tc := range []struct {
		prior, next string
		want        bool
	}{
		{"5", "5", true},
		{"5", "4", true},
		{"5", "6", false},
		{"10", "9", true},
		{"9", "10", false},
		{"100", "099", true}, // a leading zero: parsed, 99 <= 100
		{"099", "100", false},
		{"007", "7", true},
		{"", "5", false},
		{"5", "", false},
		{"abc", "abc", false}, // opaque: next counts as newer
		{"-1", "-2", false},
		{"+5", "4", true}, // ParseUint refuses a sign
		{"18446744073709551615", "18446744073709551614", true}, // 2^64-1, 20 digits
		{"18446744073709551616", "1", false},                   // above 2^64-1
		{"9999999999999999999", "10000000000000000000", false}, // 19 digits and 20
		{"1234567890123456789", "1234567890123456788", true},   // 19 digits
		{"1234567890123456789", "1234567890123456790", false},
	} {
		if got, want := notNewer(tc.prior, tc.next), notNewerByParsing(tc.prior, tc.next); got != want {
			t.Errorf("notNewer(%q, %q) = %v, but parsing says %v", tc.prior, tc.next, got, want)
		}
	}
}

func FuzzNotNewerAgreesWithParsing(f *testing.F) {
	for _, s := range [][2]string{{"5", "6"}, {"10", "9"}, {"007", "7"}, {"", "x"}, {"18446744073709551615", "1"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, prior, next string) {
		if got, want := notNewer(prior, next), notNewerByParsing(prior, next); got != want {
			t.Errorf("notNewer(%q, %q) = %v, but parsing says %v", prior, next, got, want)
		}
		// Version, which the store notes to judge a new state without the old one, gives
		// the same answer wherever it gives one, and the number parsing gives.
		p, pok := Version(prior)
		n, nok := Version(next)
		if pok && nok && (n <= p) != notNewer(prior, next) {
			t.Errorf("Version(%q) = %d, Version(%q) = %d, but notNewer says %v", prior, p, next, n, notNewer(prior, next))
		}
		for _, rv := range []string{prior, next} {
			v, ok := Version(rv)
			parsed, err := strconv.ParseUint(rv, 10, 64)
			if ok && (err != nil || parsed != v) {
				t.Errorf("Version(%q) = %d, but parsing gives %d, %v", rv, v, parsed, err)
			}
			if ok != canonical(rv) {
				t.Errorf("Version(%q) ok = %v, canonical %v", rv, ok, canonical(rv))
			}
		}
	})
}
