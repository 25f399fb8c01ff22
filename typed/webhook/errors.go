package webhook

import (
	"errors"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The package's errors: each is returned wrapped, with what it is about, and matched with
// errors.Is.
var (
	// ErrNoKind is returned by Builder.Complete for a kind T that client-go's scheme does
	// not know (a custom resource's Go struct) given no Builder.WithKind, and by
	// NewConverter for a kind without a group or a version without a name.
	ErrNoKind = errors.New("webhook: the kind is unknown")
	// ErrInvalidOptions is returned for options that cannot work: a registration with a
	// nil handler, a path that is not absolute or is registered twice, a Builder with
	// neither a defaulter nor a validator, a version converted twice.
	ErrInvalidOptions = errors.New("webhook: invalid options")
	// ErrCertificate is returned by Server.Run for a serving certificate and key that
	// cannot be read or do not form a pair, and logged (the previous pair still served)
	// when replaced files do not.
	ErrCertificate = errors.New("webhook: cannot load the serving certificate")
	// ErrBadRequest is wrapped by the message of a review that cannot be handled: a body
	// that is not an AdmissionReview or ConversionReview of the expected version, too
	// large, or an object of another kind than the webhook's.
	ErrBadRequest = errors.New("webhook: bad request")
	// ErrConversion is wrapped by the message of a ConversionReview that failed: an
	// object of a version the Converter does not know, one that does not decode, or a
	// conversion function that returned an error or panicked.
	ErrConversion = errors.New("webhook: conversion failed")
	// ErrAlreadyRunning is returned by Server.Run when the Server runs already.
	ErrAlreadyRunning = errors.New("webhook: server already running")
)

// Denied is the error a Defaulter or Validator returns to refuse a request with a reason
// the user is meant to read: the API server answers the request with its Message, Code
// (403 Forbidden when zero), Reason (Forbidden when empty, Invalid with Causes from
// DenyFields) and Causes. Any other error refuses the request too, but as a failure of
// the webhook (500 Internal Server Error), not as a decision. Denied may be wrapped.
type Denied struct {
	Message string
	Code    int32
	Reason  metav1.StatusReason
	Causes  []metav1.StatusCause
}

// Deny returns a Denied error with the message formatted from format and args, which
// refuses the request as Forbidden.
func Deny(format string, args ...any) *Denied {
	return &Denied{Message: fmt.Sprintf(format, args...)}
}

// DenyFields returns a Denied error that refuses the request as Invalid (422), each field
// error a cause with its path, as the API server's own validation does; nil when errs is
// empty, so that `return nil, webhook.DenyFields(errs)` allows a valid object. Return it
// through a nil check (or as error directly): a nil *Denied in an error is not nil.
func DenyFields(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	causes := make([]metav1.StatusCause, len(errs))
	for i, e := range errs {
		causes[i] = metav1.StatusCause{Type: metav1.CauseType(e.Type), Message: e.ErrorBody(), Field: e.Field}
	}
	return &Denied{Message: errs.ToAggregate().Error(), Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Causes: causes}
}

// Error returns the message. A nil *Denied, returned as an error by mistake (it is not a
// nil error), says so, and refuses the request as a failure of the webhook.
func (d *Denied) Error() string {
	if d == nil {
		return "a nil *webhook.Denied"
	}
	return d.Message
}

// status is the Status the API server answers the request with.
func (d *Denied) status() *metav1.Status {
	s := &metav1.Status{Status: metav1.StatusFailure, Message: d.Message, Code: d.Code, Reason: d.Reason}
	if s.Code == 0 {
		s.Code = http.StatusForbidden
	}
	if s.Reason == "" {
		s.Reason = metav1.StatusReasonForbidden
	}
	if len(d.Causes) > 0 {
		s.Details = &metav1.StatusDetails{Causes: d.Causes}
	}
	return s
}
