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
// It is the one place that tells routine from real errors: a real failure (forbidden, an
// unexpected object, a list that fails otherwise) deserves an error log, a routine one
// only an info log at verbosity 2, as client-go's reflector logs them. The reflector's
// default logging and the controller's both use it; an error handler receives every error
// either way.
func IsRoutine(err error) bool {
	if err == nil {
		return false
	}
	return isRVUnavailable(err) ||
		errors.Is(err, ErrShortWatch) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) ||
		utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		apierrors.IsTooManyRequests(err)
}
