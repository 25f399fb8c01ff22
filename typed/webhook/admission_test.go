package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/webhook"
)

var podKind = corev1.SchemeGroupVersion.WithKind("Pod")

// review posts an AdmissionReview of req to h and returns the response, failing t
// unless h answers 200 with a review of the same UID.
func review(t *testing.T, h http.Handler, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	req.UID = "uid-1"
	body, err := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	code, out := post(h, "application/json", body)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, out)
	}
	var got admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &got); err != nil || got.Response == nil || got.Response.UID != "uid-1" || got.APIVersion != "admission.k8s.io/v1" {
		t.Fatalf("answer %s (%v); want a v1 AdmissionReview with the request's UID", out, err)
	}
	return got.Response
}

func post(h http.Handler, contentType string, body []byte) (int, []byte) {
	r := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

func raw(t *testing.T, obj any) runtime.RawExtension {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

func pod(name, image string) *corev1.Pod {
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}
}

func request(op admissionv1.Operation, obj, old runtime.RawExtension) *admissionv1.AdmissionRequest {
	return &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind(podKind), Operation: op, Name: "p", Namespace: "ns", Object: obj, OldObject: old}
}

func TestDefaulterAnswersWithThePatchOfWhatItChangedOnly(t *testing.T) {
	h, err := webhook.NewDefaulting(podKind, webhook.DefaulterFunc[*corev1.Pod](func(ctx context.Context, p *corev1.Pod) (webhook.Warnings, error) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels["defaulted/by"] = "webhook" // a key that needs escaping in a JSON pointer
		if img, ok := strings.CutSuffix(p.Spec.Containers[0].Image, ":latest"); ok {
			p.Spec.Containers[0].Image = img + ":1.0"
		}
		p.Spec.RestartPolicy = ""
		return webhook.Warnings{"image pinned"}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	// The request has a field *corev1.Pod does not know: the patch must leave it alone.
	in := pod("p", "nginx:latest")
	in.Spec.RestartPolicy = corev1.RestartPolicyAlways
	b, _ := json.Marshal(in)
	var doc map[string]any
	_ = json.Unmarshal(b, &doc)
	doc["spec"].(map[string]any)["futureField"] = "kept"
	resp := review(t, h, request(admissionv1.Create, raw(t, doc), runtime.RawExtension{}))
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response %+v; want allowed with a JSON patch", resp)
	}
	if diff := cmp.Diff(webhook.Warnings{"image pinned"}, webhook.Warnings(resp.Warnings)); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	got := applyPatch(t, doc, resp.Patch)
	want := pod("p", "nginx:1.0")
	want.Labels = map[string]string{"defaulted/by": "webhook"}
	wb, _ := json.Marshal(want)
	var wantDoc map[string]any
	_ = json.Unmarshal(wb, &wantDoc)
	wantDoc["spec"].(map[string]any)["futureField"] = "kept"
	if diff := cmp.Diff(wantDoc, got); diff != "" {
		t.Errorf("the patched request (-want +got):\n%s\npatch: %s", diff, resp.Patch)
	}

	// Nothing to change: no patch at all.
	resp = review(t, h, request(admissionv1.Update, raw(t, want), raw(t, want)))
	if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
		t.Errorf("a defaulted object: response %+v, patch %s; want allowed with no patch", resp, resp.Patch)
	}
	// A delete is not defaulted.
	resp = review(t, h, request(admissionv1.Delete, runtime.RawExtension{}, raw(t, want)))
	if !resp.Allowed || resp.Patch != nil {
		t.Errorf("delete: response %+v; want allowed with no patch", resp)
	}
}

func TestValidatorSeesEachOperationsObjects(t *testing.T) {
	var seen []string
	h, err := webhook.NewValidating(podKind, webhook.ValidatorFuncs[*corev1.Pod]{
		Create: func(ctx context.Context, p *corev1.Pod) (webhook.Warnings, error) {
			seen = append(seen, "create "+p.Spec.Containers[0].Image)
			return webhook.Warnings{"created"}, nil
		},
		Update: func(ctx context.Context, old, p *corev1.Pod) (webhook.Warnings, error) {
			seen = append(seen, "update "+old.Spec.Containers[0].Image+" to "+p.Spec.Containers[0].Image)
			return nil, nil
		},
		Delete: func(ctx context.Context, p *corev1.Pod) (webhook.Warnings, error) {
			req, _ := webhook.RequestFromContext(ctx)
			seen = append(seen, "delete "+p.Spec.Containers[0].Image+" by "+req.UserInfo.Username)
			if webhook.IsDryRun(ctx) {
				seen = append(seen, "dry run")
			}
			return nil, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp := review(t, h, request(admissionv1.Create, raw(t, pod("p", "a")), runtime.RawExtension{})); !resp.Allowed || len(resp.Warnings) != 1 {
		t.Errorf("create: %+v; want allowed with its warning", resp)
	}
	review(t, h, request(admissionv1.Update, raw(t, pod("p", "b")), raw(t, pod("p", "a"))))
	del := request(admissionv1.Delete, runtime.RawExtension{}, raw(t, pod("p", "b")))
	del.UserInfo.Username, del.DryRun = "alice", ptr.To(true)
	review(t, h, del)
	if resp := review(t, h, request(admissionv1.Connect, runtime.RawExtension{}, runtime.RawExtension{})); !resp.Allowed {
		t.Errorf("connect: %+v; want allowed (no object of the kind)", resp)
	}
	if diff := cmp.Diff([]string{"create a", "update a to b", "delete b by alice", "dry run"}, seen); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestErrorsAndPanicsAreDenialsThatSayWhy(t *testing.T) {
	var calls atomic.Int32
	validate := func(err error, panicking bool) webhook.Validator[*corev1.Pod] {
		return webhook.ValidatorFuncs[*corev1.Pod]{Create: func(ctx context.Context, p *corev1.Pod) (webhook.Warnings, error) {
			calls.Add(1)
			if panicking {
				panic("boom")
			}
			return webhook.Warnings{"w"}, err
		}}
	}
	var typedNilDenied *webhook.Denied
	for _, tc := range []struct {
		name    string
		err     error
		panics  bool
		code    int32
		reason  metav1.StatusReason
		message string
		causes  []metav1.StatusCause
	}{
		{name: "Deny", err: webhook.Deny("message %d characters too long", 3), code: 403, reason: metav1.StatusReasonForbidden, message: "message 3 characters too long"},
		{name: "wrapped Denied", err: errors.Join(errors.New("context"), &webhook.Denied{Message: "quota", Code: 429, Reason: metav1.StatusReasonTooManyRequests}),
			code: 429, reason: metav1.StatusReasonTooManyRequests, message: "quota"},
		{name: "DenyFields", err: webhook.DenyFields(field.ErrorList{field.TooLong(field.NewPath("spec", "message"), "", 10)}),
			code: 422, reason: metav1.StatusReasonInvalid, message: "spec.message: Too long: may not be more than 10 bytes",
			causes: []metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeTooLong), Message: "Too long: may not be more than 10 bytes", Field: "spec.message"}}},
		{name: "API status error", err: apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("taken")),
			code: 409, reason: metav1.StatusReasonConflict, message: `Operation cannot be fulfilled on pods "p": taken`},
		{name: "any other error", err: errors.New("database down"), code: 500, reason: metav1.StatusReasonInternalError, message: "webhook for Pod failed: database down"},
		{name: "a typed nil Denied is an internal error, not a panic", err: typedNilDenied, code: 500, reason: metav1.StatusReasonInternalError, message: "webhook for Pod failed: a nil *webhook.Denied"},
		{name: "panic", panics: true, code: 500, reason: metav1.StatusReasonInternalError, message: "webhook for Pod panicked: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := webhook.NewValidating(podKind, validate(tc.err, tc.panics))
			if err != nil {
				t.Fatal(err)
			}
			resp := review(t, h, request(admissionv1.Create, raw(t, pod("p", "a")), runtime.RawExtension{}))
			if resp.Allowed || resp.Result == nil {
				t.Fatalf("response %+v; want refused with a status", resp)
			}
			got := *resp.Result
			want := metav1.Status{Status: metav1.StatusFailure, Code: tc.code, Reason: tc.reason, Message: tc.message}
			if tc.causes != nil {
				want.Details = &metav1.StatusDetails{Causes: tc.causes}
			}
			if tc.name == "API status error" {
				want.Details = got.Details // the error's own details, passed through
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if !tc.panics && len(resp.Warnings) != 1 {
				t.Errorf("warnings %q; want those returned with the error", resp.Warnings)
			}
		})
	}
	if calls.Load() == 0 {
		t.Error("the validator was never called")
	}
}

func TestRequestsForAnotherKindOrWithoutTheirObjectsAreRefused(t *testing.T) {
	called := false
	h, err := webhook.NewValidating(podKind, webhook.ValidatorFuncs[*corev1.Pod]{
		Create: func(context.Context, *corev1.Pod) (webhook.Warnings, error) { called = true; return nil, nil },
		Update: func(context.Context, *corev1.Pod, *corev1.Pod) (webhook.Warnings, error) {
			called = true
			return nil, nil
		},
		Delete: func(context.Context, *corev1.Pod) (webhook.Warnings, error) { called = true; return nil, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	svc := raw(t, &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Name: "p"}})
	wrongKind := request(admissionv1.Create, raw(t, pod("p", "a")), runtime.RawExtension{})
	wrongKind.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "Service"}
	for name, tc := range map[string]struct {
		req  *admissionv1.AdmissionRequest
		want string
	}{
		"the request's kind":       {wrongKind, "the webhook for /v1, Kind=Pod was called for /v1, Kind=Service"},
		"the object's kind":        {request(admissionv1.Create, svc, runtime.RawExtension{}), "the request's object is a /v1, Kind=Service, not a /v1, Kind=Pod"},
		"an object that is no Pod": {request(admissionv1.Create, runtime.RawExtension{Raw: []byte(`{"spec":"x"}`)}, runtime.RawExtension{}), "does not decode into a *v1.Pod"},
		"an update with no old":    {request(admissionv1.Update, raw(t, pod("p", "a")), runtime.RawExtension{}), "the request has no oldObject"},
		"a delete with no old":     {request(admissionv1.Delete, raw(t, pod("p", "a")), runtime.RawExtension{}), "the request has no oldObject"},
		"a create with no object":  {request(admissionv1.Create, runtime.RawExtension{}, runtime.RawExtension{}), "the request has no object"},
	} {
		resp := review(t, h, tc.req)
		if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusBadRequest || !strings.Contains(resp.Result.Message, tc.want) ||
			!strings.Contains(resp.Result.Message, webhook.ErrBadRequest.Error()) {
			t.Errorf("%s: response %+v; want refused 400 saying %q", name, resp.Result, tc.want)
		}
	}
	if called {
		t.Error("the validator was called with a request it cannot handle")
	}
}

func TestBodiesThatAreNotAdmissionReviewsGetHTTPErrors(t *testing.T) {
	h, err := webhook.NewDefaulting(podKind, webhook.DefaulterFunc[*corev1.Pod](func(context.Context, *corev1.Pod) (webhook.Warnings, error) {
		t.Error("the defaulter was called")
		return nil, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	huge := append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"`), bytes.Repeat([]byte("x"), webhook.MaxRequestBytes)...)
	for name, tc := range map[string]struct {
		contentType string
		body        string
		code        int
	}{
		"not JSON":                 {"application/json", "{", http.StatusBadRequest},
		"a v1beta1 review":         {"application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`, http.StatusBadRequest},
		"a review with no request": {"application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		"a ConversionReview":       {"application/json", `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u"}}`, http.StatusBadRequest},
		"YAML":                     {"application/yaml", "apiVersion: admission.k8s.io/v1", http.StatusUnsupportedMediaType},
		"too large":                {"application/json", string(huge), http.StatusRequestEntityTooLarge},
	} {
		code, body := post(h, tc.contentType, []byte(tc.body))
		if code != tc.code || !strings.Contains(string(body), webhook.ErrBadRequest.Error()) {
			t.Errorf("%s: %d %s; want %d naming the bad request", name, code, body, tc.code)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/hook", nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost {
		t.Errorf("GET: %d, Allow %q; want 405, POST", w.Code, w.Header().Get("Allow"))
	}
}

func TestConstructorsRefuseWhatCannotWork(t *testing.T) {
	var typedNil webhook.DefaulterFunc[*corev1.Pod]
	for name, err := range map[string]error{
		"nil defaulter":       second(webhook.NewDefaulting[*corev1.Pod](podKind, nil)),
		"typed nil defaulter": second(webhook.NewDefaulting[*corev1.Pod](podKind, typedNil)),
		"nil validator":       second(webhook.NewValidating[*corev1.Pod](podKind, nil)),
	} {
		if !errors.Is(err, webhook.ErrInvalidOptions) {
			t.Errorf("%s: %v; want ErrInvalidOptions", name, err)
		}
	}
	if _, err := webhook.NewValidating[*corev1.Pod](schema.GroupVersionKind{Kind: "Pod"}, webhook.ValidatorFuncs[*corev1.Pod]{}); !errors.Is(err, webhook.ErrNoKind) {
		t.Errorf("a kind with no version: %v; want ErrNoKind", err)
	}
}

func second[A any](_ A, err error) error { return err }

// A defaulter that refuses, or panics after changing the object, refuses the request
// with no patch: a half-defaulted object is never sent back.
func TestADefaulterThatRefusesOrPanicsSendsNoPatch(t *testing.T) {
	for name, tc := range map[string]struct {
		fail func()
		code int32
	}{
		"refuses": {func() {}, http.StatusForbidden},
		"panics":  {func() { panic("half done") }, http.StatusInternalServerError},
	} {
		h, err := webhook.NewDefaulting(podKind, webhook.DefaulterFunc[*corev1.Pod](func(ctx context.Context, p *corev1.Pod) (webhook.Warnings, error) {
			p.Labels = map[string]string{"half": "done"}
			tc.fail()
			return webhook.Warnings{"w"}, webhook.Deny("no")
		}))
		if err != nil {
			t.Fatal(err)
		}
		resp := review(t, h, request(admissionv1.Create, raw(t, pod("p", "a")), runtime.RawExtension{}))
		if resp.Allowed || resp.Patch != nil || resp.PatchType != nil || resp.Result == nil || resp.Result.Code != tc.code {
			t.Errorf("%s: response %+v, patch %s; want refused %d with no patch", name, resp.Result, resp.Patch, tc.code)
		}
	}
}
