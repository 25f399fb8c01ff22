package bench

import "testing"

// benchSync times b.N syncs of lib, each from a new newLW() that lists n objects, after
// one untimed sync: with -benchtime 1x there is a single timed op, and it should not
// include first-use costs (growing the heap, faulting pages in, the API server's first
// list) that only the library which happens to run first would pay.
func benchSync(b *testing.B, lib library, newLW func() configMapLW, n int) {
	b.StopTimer()
	syncOnce(b, lib, newLW(), n, nil)
	b.ResetTimer()
	var m allocMeter
	for range b.N {
		syncOnce(b, lib, newLW(), n, &m)
	}
	m.report(b, b.N*n, "object")
}

// syncOnce starts lib on lw, which lists n objects, waits until its handler has seen
// them all and it reports synced, and stops it. The sync, not the stop, is timed by m
// when m is not nil.
func syncOnce(b *testing.B, lib library, lw configMapLW, n int, m *allocMeter) {
	b.Helper()
	rec := &recorder{}
	added := rec.expectAdds(n)
	gcNow()
	if m != nil {
		m.begin(b)
	}
	inf := lib.start(lw, rec)
	defer stopAndCheck(b, inf) // after m.end: stopping is not timed
	wait(b, added, "the initial additions")
	waitSynced(b, inf)
	if m != nil {
		m.end(b)
	}
}
