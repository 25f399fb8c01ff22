package website

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/webhook"
)

const (
	// MaxMessageLength is the longest message, in characters, the validating webhook
	// lets through: a Website is a short page, and its message is a ConfigMap's value
	// mounted into every web server.
	MaxMessageLength = 1000
	// MaxTitleLength is the longest title the defaulting webhook sets.
	MaxTitleLength = 64
	// WebhookServiceNamespace and WebhookServiceName name the Service in front of the
	// operator's webhook server, as the webhook configurations and the CRD's conversion
	// refer to it in a cluster (typed/testenv turns them into its test server's URL).
	WebhookServiceNamespace = "website-system"
	WebhookServiceName      = "website-operator-webhook"
)

// Defaulter sets a Website's title, when it has none, to the first line of its message,
// cut at MaxTitleLength characters.
type Defaulter struct{}

// Default sets w's title.
func (Defaulter) Default(_ context.Context, w *Website) (webhook.Warnings, error) {
	if w.Spec.Title == "" {
		line, _, _ := strings.Cut(w.Spec.Message, "\n")
		if utf8.RuneCountInString(line) > MaxTitleLength {
			line = string([]rune(line)[:MaxTitleLength])
		}
		w.Spec.Title = line
	}
	return nil, nil
}

// Validator refuses a Website whose message is longer than MaxMessageLength characters,
// as an invalid field, with the API server's own wording.
type Validator struct{}

// ValidateCreate validates a new Website.
func (Validator) ValidateCreate(_ context.Context, w *Website) (webhook.Warnings, error) {
	return validate(w)
}

// ValidateUpdate validates a Website's new state.
func (Validator) ValidateUpdate(_ context.Context, _, w *Website) (webhook.Warnings, error) {
	return validate(w)
}

// ValidateDelete lets every deletion through.
func (Validator) ValidateDelete(context.Context, *Website) (webhook.Warnings, error) { return nil, nil }

func validate(w *Website) (webhook.Warnings, error) {
	var errs field.ErrorList
	if utf8.RuneCountInString(w.Spec.Message) > MaxMessageLength {
		errs = append(errs, field.TooLongCharacters(field.NewPath("spec", "message"), w.Spec.Message, MaxMessageLength))
	}
	return nil, webhook.DenyFields(errs)
}

// SetupWebhooks registers the Website's webhooks on srv: defaulting and validating v1
// Websites (requests for v2 reach them converted to v1), and converting between v1 and v2.
func SetupWebhooks(srv *webhook.Server) error {
	conv, err := Converter()
	if err != nil {
		return err
	}
	return errors.Join(
		webhook.For[*Website](srv).WithKind(Kind).WithDefaulter(Defaulter{}).WithValidator(Validator{}).Complete(),
		srv.Register(conv.Path(), conv))
}

// Converter returns the conversion webhook between the Website's versions, through the
// hub v1.
func Converter() (*webhook.Converter[*Website], error) {
	conv, err := webhook.NewConverter[*Website](Kind)
	if err != nil {
		return nil, err
	}
	return conv, webhook.AddSpoke[*WebsiteV2](conv, KindV2.Version)
}

// WebhookConfigurations are the admission webhook configurations of the Website
// operator's webhooks, served behind the Service WebhookServiceNamespace/WebhookServiceName:
// what "kubectl apply" installs in a cluster, with the Service's CA bundle added (by
// cert-manager's CA injector, say). Requests for either version match (matchPolicy
// Equivalent), converted to v1. A webhook that cannot be reached refuses the request
// (failurePolicy Fail): no Website escapes validation.
func WebhookConfigurations() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{Kind.Group}, APIVersions: []string{Kind.Version}, Resources: []string{Resource.Resource}},
	}}
	service := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: WebhookServiceNamespace, Name: WebhookServiceName, Path: ptr.To(path)}}
	}
	fail, none, equivalent := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Equivalent
	meta := metav1.ObjectMeta{Name: Component}
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: meta, Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "default.websites." + Kind.Group, ClientConfig: service(webhook.MutatePath(Kind)), Rules: rules, MatchPolicy: &equivalent,
			FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](10)}}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: meta, Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "validate.websites." + Kind.Group, ClientConfig: service(webhook.ValidatePath(Kind)), Rules: rules, MatchPolicy: &equivalent,
			FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](10)}}}
}
