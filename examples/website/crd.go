package website

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/webhook"
)

// CRDName is the name of the Website's CustomResourceDefinition.
var CRDName = Resource.Resource + "." + Resource.Group

// Definition is the Website's CustomResourceDefinition, built from the Go types (no YAML
// written by hand), in two versions: v1 (Website, the storage version) and v2 (WebsiteV2),
// converted by the operator's conversion webhook behind the Service
// WebhookServiceNamespace/WebhookServiceName (in a cluster, its CA bundle is added by
// whatever issues the webhook's certificate; typed/testenv points it at a test's server).
// In both: the message at least one character (at most MaxMessageLength, which the
// validating webhook checks), replicas between 0 and 10, 1 when left out; the status
// subresource, since a Website has a status (so that status writes do not change
// metadata.generation); and the columns kubectl prints.
func Definition() *crd.Definition {
	replicas := crd.Field(".spec.replicas", crd.Minimum(0), crd.Maximum(10), crd.Default(1), crd.Optional())
	return &crd.Definition{Group: Kind.Group, Kind: Kind.Kind, Plural: Resource.Resource,
		Versions: []crd.Version{
			crd.VersionOf[*Website](Kind.Version, crd.Storage(), crd.Field(".spec.message", crd.MinLength(1)), replicas,
				crd.Column("Replicas", ".spec.replicas", 0),
				crd.Column("Ready", ".status.readyReplicas", 0),
				crd.Column("Message", ".spec.message", 0),
				crd.Column("Age", ".metadata.creationTimestamp", 0)),
			crd.VersionOf[*WebsiteV2](KindV2.Version, crd.Field(".spec.page.body", crd.MinLength(1)), replicas,
				crd.Column("Replicas", ".spec.replicas", 0),
				crd.Column("Ready", ".status.readyReplicas", 0),
				crd.Column("Title", ".spec.page.title", 0),
				crd.Column("Age", ".metadata.creationTimestamp", 0)),
		},
		Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
			ConversionReviewVersions: []string{"v1"},
			ClientConfig: &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{
				Namespace: WebhookServiceNamespace, Name: WebhookServiceName, Path: ptr.To(webhook.ConvertPath(Kind.GroupKind()))}},
		}},
	}
}

// DefinitionV1 is Definition with v1 alone and no conversion: the CRD a cluster can
// serve without the operator's webhooks. With v2 listed and no webhook to convert,
// every read of v2 would fail, and v2 is what kubectl prefers.
func DefinitionV1() *crd.Definition {
	d := Definition()
	d.Versions, d.Conversion = d.Versions[:1], nil
	return d
}

// DefinitionFor returns the CRD an operator installs: both versions (Definition) when it
// serves the conversion webhook, v1 alone (DefinitionV1) when it does not.
func DefinitionFor(webhooks bool) *crd.Definition {
	if webhooks {
		return Definition()
	}
	return DefinitionV1()
}

// InstallCRD installs the Website CRD as a cluster without the operator's webhooks can
// serve it (DefinitionV1), or upgrades it to this version of the Go types, and waits until
// the API server serves Websites (crd.InstallDefinitions: the schemas of embedded
// Kubernetes types, metav1.Condition here, come from the server). It reports whether
// the CRD was new. An operator that serves its webhooks installs both versions
// (DefinitionFor).
func InstallCRD(ctx context.Context, client apiextensionsclient.Interface) (created bool, err error) {
	_, getErr := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, CRDName, metav1.GetOptions{})
	if getErr != nil && !apierrors.IsNotFound(getErr) {
		return false, fmt.Errorf("installing the Website CRD: %w", getErr)
	}
	if err := crd.InstallDefinitions(ctx, client, DefinitionV1()); err != nil {
		return false, fmt.Errorf("installing the Website CRD: %w", err)
	}
	return getErr != nil, nil
}
