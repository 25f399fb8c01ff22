package reflect

import (
	"k8s.io/utils/clock"

	"github.com/typedinformer/typedinformer/event"
)

// SetStallClock makes c time r's WatchListStall, before r runs.
func SetStallClock[T event.Object, L List](r *Reflector[T, L], c clock.WithTicker) { r.stallClock = c }
