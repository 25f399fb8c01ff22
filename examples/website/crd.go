package website

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// CRD returns the Website's CustomResourceDefinition, with the status subresource (so
// that status writes do not change metadata.generation) and the columns kubectl prints.
func CRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	integer := apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr.To(0.0)}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: Resource.Resource + "." + Resource.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Kind.Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: Resource.Resource, Singular: "website", Kind: Kind.Kind, ListKind: Kind.Kind + "List",
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Kind.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Required: []string{"message"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"message":  str,
							"replicas": {Type: "integer", Minimum: ptr.To(0.0), Maximum: ptr.To(10.0), Default: &apiextensionsv1.JSON{Raw: []byte("1")}},
						}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"observedGeneration": integer,
							"readyReplicas":      integer,
							"conditions": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
								Type: "object", XPreserveUnknownFields: ptr.To(true),
							}}},
						}},
					},
				}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"},
					{Name: "Ready", Type: "integer", JSONPath: ".status.readyReplicas"},
					{Name: "Message", Type: "string", JSONPath: ".spec.message"},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
			}},
		},
	}
}

// InstallCRD creates the Website CRD unless it exists, and waits until the API server
// serves Websites. A CRD being deleted is waited for, then created anew. It reports
// whether it created the CRD.
func InstallCRD(ctx context.Context, client apiextensionsclient.Interface) (created bool, err error) {
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, CRD().Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = crds.Create(ctx, CRD(), metav1.CreateOptions{})
			created = err == nil
			return false, ignoreAlreadyExists(err)
		case err != nil:
			return false, err
		case crd.DeletionTimestamp != nil:
			return false, nil // being deleted: wait until it is gone
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return created, fmt.Errorf("installing the Website CRD: %w", err)
	}
	return created, nil
}

func ignoreAlreadyExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
