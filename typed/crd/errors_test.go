package crd_test

import (
	"errors"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedinformer/typedinformer/typed/crd"
)

type recursive struct {
	Next *recursive `json:"next,omitempty"`
}

type hidden struct {
	a, b string
}

// bothEmbedded embeds two fields named Same at one depth (untagged, so that
// vet lets the test say it).
type bothEmbedded struct {
	Embedded3
	Embedded4
}

type Embedded3 struct{ Same string }

type Embedded4 struct{ Same string }

type level int

func (level) EnumValues() []string { return []string{"low"} }

type marshals struct{}

func (marshals) MarshalJSON() ([]byte, error) { return []byte("1"), nil }

// notAStruct is a runtime.Object that is not a struct.
type notAStruct []string

func (notAStruct) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (n notAStruct) DeepCopyObject() runtime.Object { return n }

func TestGoTypesWithNoSchemaAreErrorsNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name     string
		build    func() (*apiextensionsv1.CustomResourceDefinition, error)
		path     string
		contains string
	}{
		{"a chan", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[chan int]]() }, "object.Spec.V", "cannot be written as JSON"},
		{"a func", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[func()]]() }, "object.Spec.V", "cannot be written as JSON"},
		{"a complex number", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[complex128]]() }, "object.Spec.V", "cannot be written as JSON"},
		{"an interface", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[any]]() }, "object.Spec.V", "interface"},
		{"a map with int keys", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[map[int]string]]() }, "object.Spec.V", "keys must be strings"},
		{"an item of a slice", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[[]chan int]]() }, "object.Spec.V[*]", "cannot be written as JSON"},
		{"a recursive type", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[recursive]]() }, "object.Spec.V.Next", "recursive"},
		{"a struct of unexported fields only", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[hidden]]() }, "object.Spec.V", "none of its fields"},
		{"inline on a named field", func() (*apiextensionsv1.CustomResourceDefinition, error) {
			return build[struct {
				E Embedded `json:",inline"`
			}]()
		}, "object.Spec.E", "inline"},
		{"two embedded fields of one name at one depth", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[bothEmbedded]() }, "object.Spec.Embedded4.Same", "same depth"},
		{"custom JSON without a Schemer", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[marshals]]() }, "object.Spec.V", "crd.Schemer"},
		{"an int type with string EnumValues", func() (*apiextensionsv1.CustomResourceDefinition, error) { return build[value[level]]() }, "object.Spec.V", "EnumValues"},
		{"a custom resource that is not a struct", func() (*apiextensionsv1.CustomResourceDefinition, error) {
			return (&crd.Definition{Group: "g.example.com", Kind: "K", Versions: []crd.Version{crd.VersionOf[notAStruct]("v1", crd.Storage())}}).Build()
		}, "crd_test.notAStruct", "must be a struct"},
	} {
		t.Run(tc.name+" is ErrUnsupportedType naming "+tc.path, func(t *testing.T) {
			c, err := tc.build()
			var te *crd.TypeError
			if c != nil || !errors.Is(err, crd.ErrUnsupportedType) || !errors.As(err, &te) {
				t.Fatalf("Build: %v, %v; want a *TypeError matching ErrUnsupportedType", c, err)
			}
			if te.Path != tc.path || !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("error %q names %q; want the path %q and %q", err, te.Path, tc.path, tc.contains)
			}
		})
	}
}

type thing struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              thingSpec   `json:"spec"`
	Status            thingStatus `json:"status,omitempty"`
}

type thingSpec struct {
	Name     string            `json:"name"`
	Replicas *int32            `json:"replicas,omitempty"`
	Policy   policy            `json:"policy,omitempty"`
	Tags     []string          `json:"tags,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
}

type thingStatus struct {
	Replicas int32       `json:"replicas,omitempty"`
	Selector string      `json:"selector,omitempty"`
	Since    metav1.Time `json:"since,omitzero"`
}

func (t *thing) DeepCopyObject() runtime.Object { c := *t; return &c }

func TestDefinitionMistakesAreErrors(t *testing.T) {
	v := func(name string, opts ...crd.VersionOption) crd.Version { return crd.VersionOf[*thing](name, opts...) }
	for _, tc := range []struct {
		name string
		def  *crd.Definition
		want error
	}{
		{"a nil definition", nil, crd.ErrInvalidDefinition},
		{"no group", &crd.Definition{Kind: "Thing", Versions: []crd.Version{v("v1", crd.Storage())}}, crd.ErrInvalidDefinition},
		{"no kind", &crd.Definition{Group: "g.example.com", Versions: []crd.Version{v("v1", crd.Storage())}}, crd.ErrInvalidDefinition},
		{"no version", &crd.Definition{Group: "g.example.com", Kind: "Thing"}, crd.ErrInvalidDefinition},
		{"a zero Version", &crd.Definition{Group: "g.example.com", Kind: "Thing", Versions: []crd.Version{{}}}, crd.ErrInvalidDefinition},
		{"an unknown scope", &crd.Definition{Group: "g.example.com", Kind: "Thing", Scope: "Galaxy", Versions: []crd.Version{v("v1", crd.Storage())}}, crd.ErrInvalidDefinition},
		{"no storage version", &crd.Definition{Group: "g.example.com", Kind: "Thing", Versions: []crd.Version{v("v1")}}, crd.ErrInvalidDefinition},
		{"two storage versions", &crd.Definition{Group: "g.example.com", Kind: "Thing", Versions: []crd.Version{v("v1", crd.Storage()), v("v2", crd.Storage())}}, crd.ErrInvalidDefinition},
		{"a version named twice", &crd.Definition{Group: "g.example.com", Kind: "Thing", Versions: []crd.Version{v("v1", crd.Storage()), v("v1")}}, crd.ErrInvalidDefinition},
	} {
		t.Run(tc.name+" is an error", func(t *testing.T) {
			c, err := tc.def.Build()
			if c != nil || !errors.Is(err, tc.want) {
				t.Errorf("Build: %v, %v; want %v", c, err, tc.want)
			}
		})
	}
}

func TestOptionsThatDoNotFitTheSchemaAreErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  crd.VersionOption
		want error
	}{
		{"a path that is not in the schema", crd.Field(".spec.nmae", crd.MinLength(1)), crd.ErrUnknownPath},
		{"a metadata field other than name and generateName", crd.Field(".metadata.labels", crd.MaxLength(1)), crd.ErrUnknownPath},
		{"a path without a leading dot", crd.Field("spec.name", crd.MinLength(1)), crd.ErrUnknownPath},
		{"an index other than [*]", crd.Field(".spec.tags[0]", crd.MinLength(1)), crd.ErrUnknownPath},
		{"[*] on a string", crd.Field(".spec.name[*]", crd.MinLength(1)), crd.ErrUnknownPath},
		{"a minimum on a string", crd.Field(".spec.name", crd.Minimum(0)), crd.ErrInvalidValue},
		{"a maximum on a list", crd.Field(".spec.tags", crd.Maximum(0)), crd.ErrInvalidValue},
		{"a pattern on an integer", crd.Field(".spec.replicas", crd.Pattern("^a$")), crd.ErrInvalidValue},
		{"a pattern that does not compile", crd.Field(".spec.name", crd.Pattern("(")), crd.ErrInvalidValue},
		{"a max length on an integer", crd.Field(".spec.replicas", crd.MaxLength(3)), crd.ErrInvalidValue},
		{"min items on a map", crd.Field(".spec.labels", crd.MinItems(1)), crd.ErrInvalidValue},
		{"a default of the wrong type", crd.Field(".spec.replicas", crd.Default("three")), crd.ErrInvalidValue},
		{"a default not an integer", crd.Field(".spec.replicas", crd.Default(1.5)), crd.ErrInvalidValue},
		{"a default outside the enum", crd.Field(".spec.policy", crd.Default("C")), crd.ErrInvalidValue},
		{"a default below the minimum set before it", crd.Field(".spec.replicas", crd.Minimum(1), crd.Default(0)), crd.ErrInvalidValue},
		{"a default that misses a required field", crd.Field(".spec", crd.Default(map[string]any{"replicas": 1})), crd.ErrInvalidValue},
		{"a default with an unknown field", crd.Field(".spec", crd.Default(map[string]any{"name": "a", "color": "red"})), crd.ErrInvalidValue},
		{"an enum value of the wrong type", crd.Field(".spec.name", crd.Enum("a", 1)), crd.ErrInvalidValue},
		{"an empty enum", crd.Field(".spec.name", crd.Enum()), crd.ErrInvalidValue},
		{"an empty rule", crd.Field(".", crd.Rule(" ", "m")), crd.ErrInvalidValue},
		{"required at the root", crd.Field(".", crd.Required()), crd.ErrInvalidValue},
		{"a zero Constraint", crd.Field(".spec.name", crd.Constraint{}), crd.ErrInvalidValue},
		{"a scale path of a string", crd.Scale(".spec.name", ".status.replicas", ""), crd.ErrInvalidValue},
		{"a scale path outside spec", crd.Scale(".status.replicas", ".status.replicas", ""), crd.ErrInvalidValue},
		{"a scale path that is not there", crd.Scale(".spec.replicas", ".status.ready", ""), crd.ErrUnknownPath},
		{"a label selector path of an integer", crd.Scale(".spec.replicas", ".status.replicas", ".status.replicas"), crd.ErrInvalidValue},
		{"a column of a path that is not there", crd.Column("X", ".spec.x", 0), crd.ErrUnknownPath},
		{"a column without a name", crd.Column("", ".spec.name", 0), crd.ErrInvalidValue},
	} {
		t.Run(tc.name+" is an error", func(t *testing.T) {
			d := &crd.Definition{Group: "g.example.com", Kind: "Thing", Versions: []crd.Version{crd.VersionOf[*thing]("v1", crd.Storage(), tc.opt)}}
			c, err := d.Build()
			var pe *crd.PathError
			if c != nil || !errors.Is(err, tc.want) || !errors.As(err, &pe) || pe.Version != "v1" {
				t.Errorf("Build: %v, %v; want a *PathError of version v1 matching %v", c, err, tc.want)
			}
		})
	}
}
