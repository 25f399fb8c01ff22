package typed

import "errors"

type terminalError struct{ err error }

func (e terminalError) Error() string { return "terminal: " + e.err.Error() }
func (e terminalError) Unwrap() error { return e.err }

// Terminal marks err as not worth retrying: the key is dropped until its next event, and a
// retry or requeue that an earlier reconcile of the key scheduled is cancelled.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return terminalError{err}
}

// IsTerminal reports whether err was marked with Terminal.
func IsTerminal(err error) bool {
	var t terminalError
	return errors.As(err, &t)
}

// ErrRetriesExhausted is reported, wrapped with the last error, when a key has failed
// Options.MaxRetries times in a row; the key is then dropped until its next event.
var ErrRetriesExhausted = errors.New("retries exhausted")

// ErrNoRegistration is returned, wrapped, by Run when a Source's AddHandler returned
// neither a Registration nor an error: the Loop could not know when the source had
// synced, nor stop its handler.
var ErrNoRegistration = errors.New("the source returned no registration")

// ErrHandedOver is reported, wrapped with the reconcile's error, for a deletion whose
// reconcile during a hand-over (RunHandingOver, or a part's HandOver) failed or asked
// to be requeued: it is not retried, as its keys now belong to another process.
var ErrHandedOver = errors.New("handed over before the deletion's reconcile succeeded")
