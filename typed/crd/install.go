package crd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/typedinformer/typedinformer/internal/guard"
)

// InstallTimeout caps each CRD's wait in Install, on top of ctx.
const InstallTimeout = 2 * time.Minute

// installPoll is how often Install checks a CRD's state.
const installPoll = 50 * time.Millisecond

// Install creates each CRD, or updates the labels, annotations and spec of
// the CRD of that name (from its current resourceVersion, retrying on
// conflicts; one being deleted is waited for, then created anew), and
// returns once every one is ready to use: Established and NamesAccepted are
// true, its accepted names are its spec's names, and in every served version
// discovery lists its resource and a list of it succeeds, so clients,
// informers and REST mappers find it. The values are not modified.
//
// An error names the CRD: the server's refusal of an invalid CRD (an API
// error, apierrors.IsInvalid), names not accepted (ErrNamesNotAccepted, with
// the server's message, such as a plural already taken), or the condition
// that did not hold in time (ctx, or InstallTimeout for each CRD).
func Install(ctx context.Context, client apiextensionsclient.Interface, crds ...*apiextensionsv1.CustomResourceDefinition) error {
	if guard.IsNil(client) {
		return fmt.Errorf("%w: nil client", ErrInvalidDefinition)
	}
	for i, crd := range crds {
		if crd == nil {
			return fmt.Errorf("%w: CRD %d of %d is nil", ErrInvalidDefinition, i+1, len(crds))
		}
	}
	for _, crd := range crds {
		if err := createOrUpdate(ctx, client, crd); err != nil {
			return fmt.Errorf("crd: installing CRD %s: %w", crd.Name, err)
		}
	}
	// Wait only once every CRD is written: they become established in parallel.
	for _, crd := range crds {
		if err := waitReady(ctx, client, crd); err != nil {
			return fmt.Errorf("crd: installing CRD %s: %w", crd.Name, err)
		}
	}
	return nil
}

func createOrUpdate(ctx context.Context, client apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) error {
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	want := crd.DeepCopy()
	want.ResourceVersion, want.UID = "", ""
	want.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	var reason string
	err := poll(ctx, &reason, func(ctx context.Context) (bool, error) {
		_, err := crds.Create(ctx, want, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err == nil, err
		}
		deleting := false
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			existing, err := crds.Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if deleting = existing.DeletionTimestamp != nil; deleting {
				return nil
			}
			existing.Labels, existing.Annotations, existing.Spec = want.Labels, want.Annotations, want.Spec
			_, err = crds.Update(ctx, existing, metav1.UpdateOptions{})
			return err
		})
		if apierrors.IsNotFound(err) || deleting {
			reason = "the existing CRD is being deleted"
			return false, nil // gone meanwhile, or going: create it anew
		}
		return err == nil, err
	})
	return err
}

func waitReady(ctx context.Context, client apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) error {
	ctx, cancel := context.WithTimeout(ctx, InstallTimeout)
	defer cancel()
	plural := crd.Spec.Names.Plural
	var reason string
	return poll(ctx, &reason, func(ctx context.Context) (bool, error) {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			reason = err.Error()
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
				return false, fmt.Errorf("its names are not accepted: %w: %s: %s", ErrNamesNotAccepted, c.Reason, c.Message)
			}
		}
		if !conditionTrue(got, apiextensionsv1.Established) || !conditionTrue(got, apiextensionsv1.NamesAccepted) {
			reason = "not established yet (conditions: " + describeConditions(got) + ")"
			return false, nil
		}
		if got.Status.AcceptedNames.Plural != plural || got.Status.AcceptedNames.Kind != crd.Spec.Names.Kind {
			reason = fmt.Sprintf("its accepted names are still %s/%s", got.Status.AcceptedNames.Plural, got.Status.AcceptedNames.Kind)
			return false, nil
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := crd.Spec.Group + "/" + v.Name
			resources, err := client.Discovery().ServerResourcesForGroupVersion(gv)
			if err != nil {
				reason = fmt.Sprintf("discovery of %s: %v", gv, err)
				return false, nil
			}
			if !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
				reason = fmt.Sprintf("discovery of %s does not list %s yet", gv, plural)
				return false, nil
			}
			// The resource's handler may lag behind discovery: list once.
			err = client.ApiextensionsV1().RESTClient().Get().AbsPath("/apis", crd.Spec.Group, v.Name, plural).
				Param("limit", "1").Do(ctx).Error()
			if err != nil {
				reason = fmt.Sprintf("listing %s in %s: %v", plural, gv, err)
				return false, nil
			}
		}
		return true, nil
	})
}

// poll calls check until it is done or fails; the error of a wait that ended
// says the last reason to wait.
func poll(ctx context.Context, reason *string, check func(context.Context) (bool, error)) error {
	err := wait.PollUntilContextCancel(ctx, installPoll, true, func(ctx context.Context) (bool, error) {
		reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return check(reqCtx)
	})
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) && *reason != "" {
		return fmt.Errorf("%w, when %s", context.Cause(ctx), *reason)
	}
	return err
}

func conditionTrue(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == t {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

func describeConditions(crd *apiextensionsv1.CustomResourceDefinition) string {
	if len(crd.Status.Conditions) == 0 {
		return "none"
	}
	parts := make([]string, len(crd.Status.Conditions))
	for i, c := range crd.Status.Conditions {
		parts[i] = fmt.Sprintf("%s=%s", c.Type, c.Status)
		if c.Reason != "" {
			parts[i] += " (" + c.Reason + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// InstallDefinitions builds each Definition with the schemas of embedded
// Kubernetes API types from client's server (Definition.BuildFromServer), so
// the CRDs refuse what the server refuses in built-in objects, and installs
// them as Install does. Nothing is installed if one does not build.
func InstallDefinitions(ctx context.Context, client apiextensionsclient.Interface, defs ...*Definition) error {
	if guard.IsNil(client) {
		return fmt.Errorf("%w: nil client", ErrInvalidDefinition)
	}
	for _, d := range defs {
		if _, err := d.Build(); err != nil {
			return err // said offline, before asking the server anything
		}
	}
	// One reader of the server's documents for all: each is fetched once.
	server := newServerSchemas(ctx, client.Discovery().OpenAPIV3())
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(defs))
	for _, d := range defs {
		c, err := d.build(&generator{server: server})
		if err != nil {
			return err
		}
		crds = append(crds, c)
	}
	return Install(ctx, client, crds...)
}
