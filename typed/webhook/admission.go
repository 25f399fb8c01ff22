package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime/debug"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	kjson "sigs.k8s.io/json"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/client"
)

// MaxRequestBytes bounds the body of a review: an object the API server stores is at
// most about 3 MiB, and an update's review carries two of them. A larger body is
// refused with 413 Request Entity Too Large before it is decoded.
const MaxRequestBytes = 7 << 20

// Warnings are messages the API server returns to the client with its answer (kubectl
// prints them), whether the request is allowed or not.
type Warnings []string

// Defaulter sets defaults on an object of kind T being created or updated. The handler
// answers with a JSON patch from the object as decoded to the object as Default left it;
// fields of the request that T does not have are left as they are. An error refuses the
// request (see Denied).
type Defaulter[T event.Object] interface {
	Default(ctx context.Context, obj T) (Warnings, error)
}

// DefaulterFunc is a function that is a Defaulter.
type DefaulterFunc[T event.Object] func(ctx context.Context, obj T) (Warnings, error)

// Default calls f.
func (f DefaulterFunc[T]) Default(ctx context.Context, obj T) (Warnings, error) { return f(ctx, obj) }

// Validator validates an object of kind T being created, updated (with the object as it
// was) or deleted (the object as it is). An error refuses the request (see Denied);
// returning warnings with no error allows it with them.
type Validator[T event.Object] interface {
	ValidateCreate(ctx context.Context, obj T) (Warnings, error)
	ValidateUpdate(ctx context.Context, oldObj, newObj T) (Warnings, error)
	ValidateDelete(ctx context.Context, obj T) (Warnings, error)
}

// ValidatorFuncs is a Validator made of functions; a nil one allows its operation.
type ValidatorFuncs[T event.Object] struct {
	Create func(ctx context.Context, obj T) (Warnings, error)
	Update func(ctx context.Context, oldObj, newObj T) (Warnings, error)
	Delete func(ctx context.Context, obj T) (Warnings, error)
}

// ValidateCreate calls f.Create, when set.
func (f ValidatorFuncs[T]) ValidateCreate(ctx context.Context, obj T) (Warnings, error) {
	if f.Create == nil {
		return nil, nil
	}
	return f.Create(ctx, obj)
}

// ValidateUpdate calls f.Update, when set.
func (f ValidatorFuncs[T]) ValidateUpdate(ctx context.Context, oldObj, newObj T) (Warnings, error) {
	if f.Update == nil {
		return nil, nil
	}
	return f.Update(ctx, oldObj, newObj)
}

// ValidateDelete calls f.Delete, when set.
func (f ValidatorFuncs[T]) ValidateDelete(ctx context.Context, obj T) (Warnings, error) {
	if f.Delete == nil {
		return nil, nil
	}
	return f.Delete(ctx, obj)
}

type requestKey struct{}

// RequestFromContext returns the admission request a Defaulter or Validator is called
// for: its user, operation, options, sub-resource and dry-run flag.
func RequestFromContext(ctx context.Context) (*admissionv1.AdmissionRequest, bool) {
	req, ok := ctx.Value(requestKey{}).(*admissionv1.AdmissionRequest)
	return req, ok
}

// IsDryRun reports whether the admission request a Defaulter or Validator is called for
// is a dry run: nothing it decides will be persisted, so it must have no side effects
// (the webhook configurations say sideEffects: None, so that dry runs are sent at all).
func IsDryRun(ctx context.Context) bool {
	req, ok := RequestFromContext(ctx)
	return ok && req.DryRun != nil && *req.DryRun
}

// Admission is the http.Handler of a defaulting or validating webhook for kind T, which
// the API server calls with admission.k8s.io/v1 AdmissionReviews. Make one with
// NewDefaulting or NewValidating (or a Builder), and register it on a Server.
//
// It never lets the server crash and never answers without saying why: a body that is not
// an AdmissionReview is answered 400 (413 when larger than MaxRequestBytes); a review of
// another kind than T, or whose objects do not decode into T, is refused 400 Bad Request;
// a Denied error (or an API status error such as apierrors.NewInvalid's) refuses with its
// status; another error or a panic refuses with 500 Internal Server Error, saying the
// webhook failed, and is logged (a panic with its stack).
type Admission[T event.Object] struct {
	kind      schema.GroupVersionKind
	defaulter Defaulter[T]
	validator Validator[T]
}

// NewDefaulting returns the mutating webhook for objects of kind (T's group, version and
// kind) that calls d on creates and updates. It returns an error wrapping
// ErrInvalidOptions for a nil d and ErrNoKind for a kind without a version or a kind.
func NewDefaulting[T event.Object](kind schema.GroupVersionKind, d Defaulter[T]) (*Admission[T], error) {
	if guard.IsNil(d) {
		return nil, fmt.Errorf("%w: a nil Defaulter for %s", ErrInvalidOptions, kind)
	}
	return newAdmission(kind, d, nil)
}

// NewValidating returns the validating webhook for objects of kind that calls v. It
// returns an error wrapping ErrInvalidOptions for a nil v and ErrNoKind for a kind
// without a version or a kind.
func NewValidating[T event.Object](kind schema.GroupVersionKind, v Validator[T]) (*Admission[T], error) {
	if guard.IsNil(v) {
		return nil, fmt.Errorf("%w: a nil Validator for %s", ErrInvalidOptions, kind)
	}
	return newAdmission(kind, nil, v)
}

func newAdmission[T event.Object](kind schema.GroupVersionKind, d Defaulter[T], v Validator[T]) (*Admission[T], error) {
	if kind.Version == "" || kind.Kind == "" {
		return nil, fmt.Errorf("%w: %q names no version and kind", ErrNoKind, kind)
	}
	return &Admission[T]{kind: kind, defaulter: d, validator: v}, nil
}

// ServeHTTP answers an AdmissionReview.
func (a *Admission[T]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if !readReview(w, r, &review, admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"), func() bool { return review.Request != nil }) {
		return
	}
	req := review.Request
	logger := klog.LoggerWithValues(klog.FromContext(r.Context()), "webhook", r.URL.Path, "uid", req.UID,
		"kind", req.Kind, "namespace", req.Namespace, "name", req.Name, "operation", req.Operation)
	ctx := context.WithValue(klog.NewContext(r.Context(), logger), requestKey{}, req)
	resp := a.admit(ctx, req)
	resp.UID = req.UID
	writeJSON(w, r, &admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
}

// admit decides req, recovering a panic of the user's code.
func (a *Admission[T]) admit(ctx context.Context, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse) {
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("panic: %v", v)
			klog.FromContext(ctx).Error(err, "The webhook panicked; the request is refused", "stack", string(debug.Stack()))
			resp = refused(http.StatusInternalServerError, metav1.StatusReasonInternalError, fmt.Sprintf("webhook for %s panicked: %v", a.kind.Kind, v))
		}
	}()
	if got := schema.GroupVersionKind(req.Kind); got != a.kind {
		return badRequest(fmt.Errorf("%w: the webhook for %s was called for %s", ErrBadRequest, a.kind, got))
	}
	if a.defaulter != nil {
		return a.mutate(ctx, req)
	}
	var warnings Warnings
	var err error
	switch req.Operation {
	case admissionv1.Create:
		obj, derr := a.decode(req.Object, "object")
		if derr != nil {
			return badRequest(derr)
		}
		warnings, err = a.validator.ValidateCreate(ctx, obj)
	case admissionv1.Update:
		obj, derr := a.decode(req.Object, "object")
		old, oerr := a.decode(req.OldObject, "oldObject")
		if derr = errors.Join(derr, oerr); derr != nil {
			return badRequest(derr)
		}
		warnings, err = a.validator.ValidateUpdate(ctx, old, obj)
	case admissionv1.Delete:
		old, derr := a.decode(req.OldObject, "oldObject")
		if derr != nil {
			return badRequest(derr)
		}
		warnings, err = a.validator.ValidateDelete(ctx, old)
	default: // CONNECT carries no object of kind T
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	return a.decided(ctx, warnings, err)
}

// mutate defaults req's object and answers with the patch.
func (a *Admission[T]) mutate(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	obj, err := a.decode(req.Object, "object")
	if err != nil {
		return badRequest(err)
	}
	before, err := json.Marshal(obj)
	if err != nil {
		return badRequest(fmt.Errorf("%w: encoding the object: %w", ErrBadRequest, err))
	}
	warnings, err := a.defaulter.Default(ctx, obj)
	if err != nil {
		return a.decided(ctx, warnings, err)
	}
	after, err := json.Marshal(obj)
	if err != nil {
		return a.decided(ctx, warnings, fmt.Errorf("encoding the defaulted object: %w", err))
	}
	patch, err := jsonPatch(before, after)
	if err != nil {
		return a.decided(ctx, warnings, err)
	}
	resp := &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
	if patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
	}
	return resp
}

// decode decodes raw, the request's field named what, into a T, checking that it is of
// the webhook's kind.
func (a *Admission[T]) decode(raw runtime.RawExtension, what string) (T, error) {
	obj := client.New[T]()
	if len(raw.Raw) == 0 {
		return obj, fmt.Errorf("%w: the request has no %s", ErrBadRequest, what)
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw.Raw, obj); err != nil {
		return obj, fmt.Errorf("%w: the request's %s does not decode into a %T: %w", ErrBadRequest, what, obj, err)
	}
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() && gvk != a.kind {
		return obj, fmt.Errorf("%w: the request's %s is a %s, not a %s", ErrBadRequest, what, gvk, a.kind)
	}
	return obj, nil
}

// decided answers with the decision of the user's code: allowed when err is nil, refused
// with err's status when it is a Denied or an API status error, refused as an internal
// error otherwise.
func (a *Admission[T]) decided(ctx context.Context, warnings Warnings, err error) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{Allowed: err == nil, Warnings: warnings}
	var denied *Denied
	var status apierrors.APIStatus
	switch {
	case err == nil:
	case errors.As(err, &denied) && denied != nil:
		resp.Result = denied.status()
	case errors.As(err, &status) && !guard.IsNil(status):
		s := status.Status()
		resp.Result = &s
	default:
		klog.FromContext(ctx).Error(err, "The webhook failed; the request is refused")
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Reason: metav1.StatusReasonInternalError, Message: fmt.Sprintf("webhook for %s failed: %v", a.kind.Kind, err)}
	}
	return resp
}

func badRequest(err error) *admissionv1.AdmissionResponse {
	return refused(http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
}

func refused(code int32, reason metav1.StatusReason, message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message}}
}

// readReview reads r's body into review, a review of kind want, checking that it is one
// and that it has a request; or answers with an HTTP error and returns false.
func readReview(w http.ResponseWriter, r *http.Request, review runtime.Object, want schema.GroupVersionKind, hasRequest func() bool) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, fmt.Sprintf("%v: method %s, want POST", ErrBadRequest, r.Method), http.StatusMethodNotAllowed)
		return false
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		http.Error(w, fmt.Sprintf("%v: content type %q, want application/json", ErrBadRequest, r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, fmt.Sprintf("%v: body larger than %d bytes", ErrBadRequest, MaxRequestBytes), http.StatusRequestEntityTooLarge)
		return false
	case err != nil:
		http.Error(w, fmt.Sprintf("%v: reading the body: %v", ErrBadRequest, err), http.StatusBadRequest)
		return false
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, review); err != nil {
		http.Error(w, fmt.Sprintf("%v: the body does not decode: %v", ErrBadRequest, err), http.StatusBadRequest)
		return false
	}
	if gvk := review.GetObjectKind().GroupVersionKind(); gvk != want || !hasRequest() {
		http.Error(w, fmt.Sprintf("%v: want a %s %s with a request, got %q", ErrBadRequest, want.GroupVersion(), want.Kind, gvk), http.StatusBadRequest)
		return false
	}
	return true
}

// writeJSON answers with v, a review.
func writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	body, err := json.Marshal(v)
	if err != nil { // a review of API types always encodes
		klog.FromContext(r.Context()).Error(err, "Encoding the webhook's answer failed")
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}
