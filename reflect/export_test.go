package reflect

import "k8s.io/utils/clock"

// SetStallClock makes c time WatchListStall until the returned function restores the
// real clock.
func SetStallClock(c clock.WithTicker) (restore func()) {
	old := stallClock
	stallClock = c
	return func() { stallClock = old }
}
