package reflect

import (
	"errors"

	"github.com/typedinformer/typedinformer/eventcache"
)

// ErrUnexpectedObject is returned, wrapped, for a list item or watch event whose object is
// not of the reflector's type T, is nil or is an Unreadable, for a bookmark or ERROR event
// whose object cannot be read, and for a nil result of Options.Transform.
var ErrUnexpectedObject = errors.New("unexpected object")

// ErrNilResult is returned, wrapped, when a ListerWatcher's List or Watch returns nil (or a
// typed nil) and no error, or a watch whose result channel is nil: there is nothing to
// read, and reading it would panic or block forever. The reflector backs off and retries.
var ErrNilResult = errors.New("ListerWatcher returned nil and no error")

// ErrIncompleteList, wrapped in the error of a ListerWatcher's List that also returns a
// non-nil list, means that the list holds the items the ListerWatcher could read and that
// others exist. The reflector reports the error through Options.OnError, keeps the items
// and replaces the cache with them as eventcache.IncompleteList, which deletes nothing:
// a live object that could not be read must not be reported deleted. A List that returns
// a nil list with such an error has failed as a whole.
var ErrIncompleteList = errors.New("incomplete list: some items could not be read")

// ErrWatchEvent is wrapped by the error a watch ERROR event becomes, together with the
// server's *apierrors.StatusError.
var ErrWatchEvent = errors.New("watch ERROR event")

// ErrShortWatch is reported, wrapped, when a watch closed sooner than a second after it
// opened without any event; the reflector then backs off, so that a server that keeps
// closing watches at once is retried with backoff, not in a hot loop.
var ErrShortWatch = errors.New("very short watch: closed without any event")

// ErrListerWatcherPanicked is returned, wrapped with the value and the stack, when a
// ListerWatcher's List or Watch panics: the reflector reports it and backs off, as for
// any other failed request, instead of ending the process.
var ErrListerWatcherPanicked = errors.New("ListerWatcher panicked")

// ErrCallbackPanicked is wrapped, with the value and the stack, by the error that a panic
// in Options.Transform or Options.ListOptions is turned into: the object is then one
// the transform failed on, and the request one that failed. It is
// eventcache.ErrCallbackPanicked, which a KeyFunc's or IndexFunc's panic wraps too, so
// that one errors.Is finds a panic of any callback of the pipeline.
var ErrCallbackPanicked = eventcache.ErrCallbackPanicked

// ErrWatchListStalled is reported, wrapped, when a watch-list request's stream delivered
// no event for WatchListStall before the bookmark that ends its initial events: the
// ListerWatcher accepted sendInitialEvents without honouring it. The reflector stops that
// watch and lists with paged lists from then on.
var ErrWatchListStalled = errors.New("watch-list stalled: its initial events never ended")
