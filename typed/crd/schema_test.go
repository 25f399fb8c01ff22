package crd_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/crd"
)

// object is a custom resource whose spec is S: each test states a Go type as S.
type object[S any] struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              S `json:"spec"`
}

func (o *object[S]) DeepCopyObject() runtime.Object { c := *o; return &c }

// build builds a one-version definition of object[S].
func build[S any](opts ...crd.VersionOption) (*apiextensionsv1.CustomResourceDefinition, error) {
	d := &crd.Definition{Group: "test.example.com", Kind: "Thing",
		Versions: []crd.Version{crd.VersionOf[*object[S]]("v1", append([]crd.VersionOption{crd.Storage()}, opts...)...)}}
	return d.Build()
}

// specOf returns the schema of the spec of object[S].
func specOf[S any](t *testing.T, opts ...crd.VersionOption) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	c, err := build[S](opts...)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
}

// value wraps a Go type as the one field of a spec, required.
type value[V any] struct {
	V V `json:"v"`
}

// valueOf returns the schema the Go type V gets as a field.
func valueOf[V any](t *testing.T) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	return specOf[value[V]](t).Properties["v"]
}

var (
	str    = apiextensionsv1.JSONSchemaProps{Type: "string"}
	int32s = apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int32"}
	int64s = apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}
)

func strMap() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}}
}

func intOrString() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}, XIntOrString: true}
}

func TestEachGoKindHasItsSchema(t *testing.T) {
	quantity := intOrString()
	quantity.Pattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	for _, tc := range []struct {
		name string
		got  func(*testing.T) apiextensionsv1.JSONSchemaProps
		want apiextensionsv1.JSONSchemaProps
	}{
		{"a string is a string", valueOf[string], str},
		{"a bool is a boolean", valueOf[bool], apiextensionsv1.JSONSchemaProps{Type: "boolean"}},
		{"an int32 is an int32 integer", valueOf[int32], int32s},
		{"an int16 is an int32 integer", valueOf[int16], int32s},
		{"an int64 is an int64 integer", valueOf[int64], int64s},
		{"an int is an int64 integer", valueOf[int], int64s},
		{"a uint32 is an int64 integer (it does not fit int32)", valueOf[uint32], int64s},
		{"a float64 is a number", valueOf[float64], apiextensionsv1.JSONSchemaProps{Type: "number"}},
		{"a float32 is a number", valueOf[float32], apiextensionsv1.JSONSchemaProps{Type: "number"}},
		{"a named string type is a string", valueOf[corev1.Protocol], str},
		{"a pointer is its element's schema", valueOf[*int32], int32s},
		{"a []byte is a base64 string, as encoding/json writes it", valueOf[[]byte], apiextensionsv1.JSONSchemaProps{Type: "string", Format: "byte"}},
		{"a slice is an array of its element", valueOf[[]string], apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}}},
		{"an array is an array of its element", valueOf[[2]int32], apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &int32s}}},
		{"a map with string keys is an object with additionalProperties", valueOf[map[string]string], strMap()},
		{"a map of a named string key type is an object too", valueOf[map[corev1.ResourceName]int64], apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &int64s}}},
		{"metav1.Time is a date-time string", valueOf[metav1.Time], apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"}},
		{"*metav1.Time is a date-time string", valueOf[*metav1.Time], apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"}},
		{"metav1.MicroTime is a date-time string", valueOf[metav1.MicroTime], apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"}},
		{"metav1.Duration is a string", valueOf[metav1.Duration], str},
		{"resource.Quantity is an int-or-string with controller-gen's pattern", valueOf[resource.Quantity], quantity},
		{"intstr.IntOrString is an int-or-string", valueOf[intstr.IntOrString], intOrString()},
		{"runtime.RawExtension is an object whose fields are kept", valueOf[runtime.RawExtension], apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}},
		{"apiextensionsv1.JSON is any value, kept", valueOf[apiextensionsv1.JSON], apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: ptr.To(true)}},
		{"json.RawMessage is any value, kept", valueOf[json.RawMessage], apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: ptr.To(true)}},
		{"a nested metav1.ObjectMeta keeps name, namespace, labels, annotations and finalizers", valueOf[metav1.ObjectMeta], apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name": str, "namespace": str, "labels": strMap(), "annotations": strMap(),
			"finalizers": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}},
		}}},
		{"a struct is an object of its fields", valueOf[struct {
			A string `json:"a"`
		}], apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"a": str}, Required: []string{"a"}}},
		{"an empty struct is an object", valueOf[struct{}], apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got(t)); diff != "" {
				t.Errorf("schema (-want +got):\n%s", diff)
			}
		})
	}
}

type fields struct {
	Required   string  `json:"required"`
	OmitEmpty  string  `json:"omitEmpty,omitempty"`
	OmitZero   string  `json:"omitZero,omitzero"`
	Pointer    *string `json:"pointer"`
	Skipped    string  `json:"-"`
	unexported string
	NoTag      string
	Quoted     int64 `json:"quoted,string"`
	Embedded
	*EmbeddedPointer
	Inline    `json:",inline"`
	Named     Embedded `json:"named,omitempty"`
	Shadowed  string   `json:"shadowed"`
	Embedded2 `json:"embedded2"`
}

type Embedded struct {
	FromEmbedded string `json:"fromEmbedded"`
	Shadowed     int32  `json:"shadowed"`
}

type EmbeddedPointer struct {
	FromPointer string `json:"fromPointer"`
}

type Inline struct {
	FromInline string `json:"fromInline,omitempty"`
}

type Embedded2 struct {
	X string `json:"x"`
}

func TestStructFieldsFollowEncodingJSON(t *testing.T) {
	got := specOf[fields](t)
	want := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"required": str, "omitEmpty": str, "omitZero": str, "pointer": str, "NoTag": str,
		"quoted":       str, // ,string: encoding/json quotes the number
		"fromEmbedded": str, "fromPointer": str, "fromInline": str,
		"named":     {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"fromEmbedded": str, "shadowed": int32s}, Required: []string{"fromEmbedded", "shadowed"}},
		"shadowed":  str, // the shallower field hides the embedded one
		"embedded2": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"x": str}, Required: []string{"x"}},
	}, Required: []string{"required", "NoTag", "quoted", "fromEmbedded", "shadowed", "embedded2"}} // fromPointer: a nil embedded pointer writes nothing
	if diff := cmp.Diff(want, got, sortRequired); diff != "" {
		t.Errorf("schema (-want +got):\n%s", diff)
	}
}

var sortRequired = cmp.Transformer("sortRequired", func(r []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range r {
		m[s] = true
	}
	return m
})

func TestTheRootHasTypeMetaAndTheServersMetadata(t *testing.T) {
	c, err := build[struct{}]()
	if err != nil {
		t.Fatal(err)
	}
	root := c.Spec.Versions[0].Schema.OpenAPIV3Schema
	want := &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"apiVersion": str, "kind": str,
		"metadata": {Type: "object"}, // the server owns metadata's schema
		"spec":     {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{}},
	}, Required: []string{"spec"}}
	if diff := cmp.Diff(want, root); diff != "" {
		t.Errorf("root schema (-want +got):\n%s", diff)
	}
}

type policy string

func (policy) EnumValues() []string { return []string{"A", "B"} }

type ranged struct {
	Min int32 `json:"min"`
	Max int32 `json:"max"`
}

func (*ranged) ValidationRules() []apiextensionsv1.ValidationRule {
	return []apiextensionsv1.ValidationRule{{Rule: "self.min <= self.max", Message: "min must not exceed max"}}
}

type custom struct{ v string }

func (custom) MarshalJSON() ([]byte, error) { return []byte(`"x"`), nil }

func (custom) CRDSchema() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "string", Format: "custom"}
}

func TestGoTypesStateTheirOwnValidation(t *testing.T) {
	t.Run("an Enumerated type's values are its enum, wherever it is used", func(t *testing.T) {
		got := specOf[struct {
			P  policy   `json:"p"`
			PP *policy  `json:"pp"`
			PS []policy `json:"ps"`
		}](t)
		for _, s := range []apiextensionsv1.JSONSchemaProps{got.Properties["p"], got.Properties["pp"], *got.Properties["ps"].Items.Schema} {
			want := apiextensionsv1.JSONSchemaProps{Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"A"`)}, {Raw: []byte(`"B"`)}}}
			if diff := cmp.Diff(want, s); diff != "" {
				t.Errorf("schema (-want +got):\n%s", diff)
			}
		}
	})
	t.Run("a Validated type's rules are its x-kubernetes-validations, also with a pointer receiver", func(t *testing.T) {
		got := valueOf[ranged](t)
		want := apiextensionsv1.ValidationRules{{Rule: "self.min <= self.max", Message: "min must not exceed max"}}
		if diff := cmp.Diff(want, got.XValidations); diff != "" {
			t.Errorf("rules (-want +got):\n%s", diff)
		}
	})
	t.Run("a Schemer's schema is used as it is, also for a type with custom JSON", func(t *testing.T) {
		if diff := cmp.Diff(apiextensionsv1.JSONSchemaProps{Type: "string", Format: "custom"}, valueOf[custom](t)); diff != "" {
			t.Errorf("schema (-want +got):\n%s", diff)
		}
	})
}

func TestListsWithAMergeKeyAreMapsWhenTheKeyIsRequired(t *testing.T) {
	got := specOf[struct {
		Containers []corev1.Container            `json:"containers" patchStrategy:"merge" patchMergeKey:"name"`
		Secrets    []corev1.LocalObjectReference `json:"secrets" patchStrategy:"merge" patchMergeKey:"name"`
		Plain      []corev1.Container            `json:"plain"`
	}](t)
	c := got.Properties["containers"]
	if ptr.Deref(c.XListType, "") != "map" || !cmp.Equal(c.XListMapKeys, []string{"name"}) {
		t.Errorf("containers: list type %v keys %v, want map keyed by name", ptr.Deref(c.XListType, ""), c.XListMapKeys)
	}
	// LocalObjectReference's name is omitempty: the server refuses map keys that may be missing.
	if s := got.Properties["secrets"]; s.XListType != nil {
		t.Errorf("secrets: list type %v, want none (its key is optional)", *s.XListType)
	}
	if p := got.Properties["plain"]; p.XListType != nil {
		t.Errorf("plain: list type %v, want none (no merge key)", *p.XListType)
	}
	if req := c.Items.Schema.Required; !cmp.Equal(req, []string{"name"}) {
		t.Errorf("a container's required fields: %v, want [name] (its json tag has no omitempty)", req)
	}
}
