package queue

import "errors"

// ErrClosed is returned by Backlog.Drain once the backlog has been closed.
var ErrClosed = errors.New("backlog closed")
