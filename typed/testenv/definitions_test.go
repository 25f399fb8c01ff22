//go:build unix

package testenv_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// Sidecar is a custom resource that embeds a built-in type.
type Sidecar struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Container corev1.Container `json:"container"`
	} `json:"spec"`
}

func (s *Sidecar) DeepCopyObject() runtime.Object {
	out := *s
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	s.Spec.Container.DeepCopyInto(&out.Spec.Container)
	return &out
}

var sidecars = schema.GroupVersionResource{Group: "testenv.typedinformer.io", Version: "v1", Resource: "sidecars"}

func sidecarDefinition() *crd.Definition {
	return &crd.Definition{Group: sidecars.Group, Kind: "Sidecar", Versions: []crd.Version{crd.VersionOf[*Sidecar](sidecars.Version, crd.Storage())}}
}

// Options.Definitions installs CRDs built from Go types, with the server's schemas of the
// built-in types they embed: a container's imagePullPolicy is checked against the
// server's enum, which no Go tag states.
func TestDefinitionsAreInstalledWithTheServersSchemas(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Definitions: []*crd.Definition{sidecarDefinition()}})
	dyn := newDynamic(t, env.AdminConfig())
	sidecar := func(policy string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": sidecars.GroupVersion().String(), "kind": "Sidecar",
			"metadata": map[string]any{"name": strings.ToLower(policy), "namespace": "default"},
			"spec":     map[string]any{"container": map[string]any{"name": "c", "image": "busybox", "imagePullPolicy": policy}},
		}}
	}
	if _, err := dyn.Resource(sidecars).Namespace("default").Create(timeout(t), sidecar("Always"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a valid Sidecar: %v", err)
	}
	_, err := dyn.Resource(sidecars).Namespace("default").Create(timeout(t), sidecar("Sometimes"), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("a Sidecar whose container's imagePullPolicy is Sometimes: %v, want Invalid", err)
	}
}

// A Definition that does not build fails Start before any process starts.
func TestStartRefusesADefinitionThatDoesNotBuild(t *testing.T) {
	start := time.Now()
	_, err := testenv.StartContext(timeout(t), testenv.Options{Definitions: []*crd.Definition{{Group: "example.com"}}})
	if !errors.Is(err, crd.ErrInvalidDefinition) {
		t.Fatalf("Start with a Definition without a kind: %v, want crd.ErrInvalidDefinition", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Start took %v to refuse it: it must not start the control plane first", took)
	}
}
