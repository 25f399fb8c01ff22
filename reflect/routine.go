package reflect

import (
	"errors"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// IsRoutine reports whether err, as the reflector reports it, is an expected event of the
// list/watch protocol rather than a failure: the server asking for a relist (410 Gone, an
// expired or too large resource version), a watch closed at once (ErrShortWatch), or the
// server going away or pushing back while it restarts or sheds load (connection refused
// or reset, EOF, a lost HTTP/2 connection, 429 Too Many Requests, which is also what a
// shutting-down kube-apiserver answers). The reflector retries all of them on its own.
//
// A connection that fails for a list (or a watch-list) is not routine: a server that
// cannot be reached for a list is as often a wrong address or a firewall as a restart,
// and must show at the default log level, as client-go logs failed lists as errors. A
// watch resumed while the server restarts is.
//
// It is the one place that tells routine from real errors: a real failure (forbidden, an
// unexpected object, a list that fails otherwise) deserves an error log, a routine one
// only an info log at verbosity 2, as client-go's reflector logs them. The reflector's
// default logging and the controller's both use it; an error handler receives every error
// either way.
func IsRoutine(err error) bool {
	if err == nil {
		return false
	}
	if isRVUnavailable(err) || errors.Is(err, ErrShortWatch) || apierrors.IsTooManyRequests(err) {
		return true
	}
	var list listError
	return !errors.As(err, &list) &&
		(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
			utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) ||
			utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err))
}

// listError marks the failure of a list or watch-list, for IsRoutine.
type listError struct{ err error }

func (e listError) Error() string { return e.err.Error() }
func (e listError) Unwrap() error { return e.err }

// IsResourceNotServed reports whether err, as a reflector reports it, says that the
// server does not serve the listed resource at all: a list or watch-list answered 404 Not
// Found, as for a CustomResourceDefinition that was deleted or an API group that is not
// installed. The reflector keeps retrying with backoff, since the resource may come back;
// an owner that knows when it does (a manager watching CustomResourceDefinitions) may
// stop the reflector on this error instead, and start it again later.
func IsResourceNotServed(err error) bool {
	var list listError
	return errors.As(err, &list) && apierrors.IsNotFound(err)
}
