package crd

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Enumerated is implemented by a Go type whose values are limited to a fixed
// set, such as a string type of constants. Wherever the type appears, its
// schema gets enum: the values, so the rule follows the type as a Go constant
// does, with no marker comment. The method is called on the type's zero value.
type Enumerated interface {
	EnumValues() []string
}

// Validated is implemented by a Go type that states CEL rules about its own
// values; they become the x-kubernetes-validations of its schema wherever the
// type appears. The method is called on the type's zero value.
type Validated interface {
	ValidationRules() []apiextensionsv1.ValidationRule
}

// Schemer is implemented by a Go type that describes its own schema, for a
// type with custom JSON marshalling that reflection cannot see through. The
// schema is used as it is: reflection does not look inside the type.
type Schemer interface {
	CRDSchema() apiextensionsv1.JSONSchemaProps
}

var (
	typeTime         = reflect.TypeFor[metav1.Time]()
	typeMicroTime    = reflect.TypeFor[metav1.MicroTime]()
	typeDuration     = reflect.TypeFor[metav1.Duration]()
	typeQuantity     = reflect.TypeFor[resource.Quantity]()
	typeIntOrString  = reflect.TypeFor[intstr.IntOrString]()
	typeRawExtension = reflect.TypeFor[runtime.RawExtension]()
	typeJSON         = reflect.TypeFor[apiextensionsv1.JSON]()
	typeRawMessage   = reflect.TypeFor[json.RawMessage]()
	typeObjectMeta   = reflect.TypeFor[metav1.ObjectMeta]()
	typeTypeMeta     = reflect.TypeFor[metav1.TypeMeta]()
	typeEnumerated   = reflect.TypeFor[Enumerated]()
	typeValidated    = reflect.TypeFor[Validated]()
	typeSchemer      = reflect.TypeFor[Schemer]()
	typeMarshaler    = reflect.TypeFor[json.Marshaler]()
)

// quantityPattern is the pattern controller-gen gives resource.Quantity.
const quantityPattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`

// intOrString is the structural schema of a value that is an integer or a
// string; the server requires exactly this anyOf with the extension.
func intOrString() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		AnyOf:        []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}},
		XIntOrString: true,
	}
}

// embeddedObjectMeta is the schema of the metadata of an object template (a
// pod template's): without properties, the server would prune its labels and
// annotations silently. It is what controller-gen's generateEmbeddedObjectMeta
// emits.
func embeddedObjectMeta() apiextensionsv1.JSONSchemaProps {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	strMap := apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}}
	return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"name": str, "namespace": str, "labels": strMap, "annotations": strMap,
		"finalizers": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}},
	}}
}

// knownSchema returns the schema of the API machinery types whose JSON is not
// what their Go structure says (custom marshalling), and whether t is one.
func knownSchema(t reflect.Type) (apiextensionsv1.JSONSchemaProps, bool) {
	switch t {
	case typeTime, typeMicroTime:
		return apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"}, true
	case typeDuration:
		return apiextensionsv1.JSONSchemaProps{Type: "string"}, true
	case typeQuantity:
		s := intOrString()
		s.Pattern = quantityPattern
		return s, true
	case typeIntOrString:
		return intOrString(), true
	case typeRawExtension:
		return apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}, true
	case typeJSON, typeRawMessage:
		return apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: ptr.To(true)}, true
	case typeObjectMeta:
		return embeddedObjectMeta(), true
	}
	return apiextensionsv1.JSONSchemaProps{}, false
}

// generator builds schemas from Go types.
type generator struct {
	// server, when set, gives the schemas of Kubernetes API types.
	server *serverSchemas
	// noDescriptions drops the descriptions of the server's schemas.
	noDescriptions bool
	// stack holds the struct types being expanded, to refuse recursion.
	stack []reflect.Type
}

// fieldInfo is what a struct field's tags say about its value's schema.
type fieldInfo struct {
	mergeKey string // patchMergeKey, with patchStrategy merge
}

// schema returns the schema of values of type t, found at the Go field path
// path.
func (g *generator) schema(t reflect.Type, path string, info fieldInfo) (apiextensionsv1.JSONSchemaProps, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s, ok := knownSchema(t); ok {
		return s, nil
	}
	if s, ok := implemented[Schemer](t, typeSchemer); ok {
		own := s.CRDSchema()
		return *own.DeepCopy(), nil // options change it; the type's own stays as it is
	}
	if g.server != nil && isKubernetesAPIType(t) {
		s, err := g.server.schemaOf(t)
		switch {
		case err == nil:
			if g.noDescriptions {
				dropDescriptions(&s)
			}
			return s, nil
		case !errors.Is(err, errNoDefinition): // a type the server does not publish is reflected
			return s, fmt.Errorf("crd: %s (%v): %w", path, t, err)
		}
	}
	s, err := g.kindSchema(t, path, info)
	if err != nil {
		return s, err
	}
	if e, ok := implemented[Enumerated](t, typeEnumerated); ok {
		plain := s
		for _, v := range e.EnumValues() {
			raw := jsonValue(v)
			if err := validate(&plain, raw.Raw, ""); err != nil {
				return s, &TypeError{Path: path, Type: t, Reason: "its EnumValues do not fit its schema: " + err.Error()}
			}
			s.Enum = append(s.Enum, raw)
		}
	}
	if v, ok := implemented[Validated](t, typeValidated); ok {
		s.XValidations = append(s.XValidations, v.ValidationRules()...)
	}
	return s, nil
}

// implemented returns t's zero value (or a pointer to it, for methods with
// pointer receivers) as an I, if it implements I.
func implemented[I any](t reflect.Type, it reflect.Type) (I, bool) {
	var zero I
	switch {
	case t.Implements(it):
		i, ok := reflect.Zero(t).Interface().(I)
		return i, ok
	case reflect.PointerTo(t).Implements(it):
		i, ok := reflect.New(t).Interface().(I)
		return i, ok
	}
	return zero, false
}

func jsonValue(v any) apiextensionsv1.JSON {
	raw, _ := json.Marshal(v) // strings and the values of JSON documents always marshal
	return apiextensionsv1.JSON{Raw: raw}
}

// kindSchema returns the schema that t's kind gives it.
func (g *generator) kindSchema(t reflect.Type, path string, info fieldInfo) (apiextensionsv1.JSONSchemaProps, error) {
	unsupported := func(reason string) (apiextensionsv1.JSONSchemaProps, error) {
		return apiextensionsv1.JSONSchemaProps{}, &TypeError{Path: path, Type: t, Reason: reason}
	}
	if t.Implements(typeMarshaler) || reflect.PointerTo(t).Implements(typeMarshaler) {
		return unsupported("it marshals itself to JSON, so its Go structure does not say its schema: implement crd.Schemer")
	}
	switch t.Kind() {
	case reflect.Bool:
		return apiextensionsv1.JSONSchemaProps{Type: "boolean"}, nil
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16:
		return apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int32"}, nil
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}, nil
	case reflect.Float32, reflect.Float64:
		return apiextensionsv1.JSONSchemaProps{Type: "number"}, nil
	case reflect.String:
		return apiextensionsv1.JSONSchemaProps{Type: "string"}, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return apiextensionsv1.JSONSchemaProps{Type: "string", Format: "byte"}, nil // encoding/json writes base64
		}
		items, err := g.schema(t.Elem(), path+"[*]", fieldInfo{})
		if err != nil {
			return items, err
		}
		s := apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &items}}
		// A merge key makes the list a map keyed by it, as the API server's
		// own schema does, but the server accepts only keys every item has.
		if k := info.mergeKey; k != "" && items.Type == "object" && slices.Contains(items.Required, k) {
			if p := items.Properties[k]; p.Type == "string" || p.Type == "integer" {
				s.XListType, s.XListMapKeys = ptr.To("map"), []string{k}
			}
		}
		return s, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return unsupported("a map's keys must be strings in a schema")
		}
		values, err := g.schema(t.Elem(), path+"[*]", fieldInfo{})
		if err != nil {
			return values, err
		}
		return apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &values}}, nil
	case reflect.Struct:
		return g.structSchema(t, path)
	case reflect.Interface:
		return unsupported("an interface has no schema: use a concrete type, runtime.RawExtension or apiextensionsv1.JSON")
	}
	return unsupported("a " + t.Kind().String() + " cannot be written as JSON")
}

// structSchema returns the schema of a struct: its JSON fields as properties,
// required unless omitempty, omitzero or a pointer.
func (g *generator) structSchema(t reflect.Type, path string) (apiextensionsv1.JSONSchemaProps, error) {
	if slices.Contains(g.stack, t) {
		return apiextensionsv1.JSONSchemaProps{}, &TypeError{Path: path, Type: t, Reason: "the type contains itself: a recursive type has no structural schema"}
	}
	g.stack = append(g.stack, t)
	defer func() { g.stack = g.stack[:len(g.stack)-1] }()
	s := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{}}
	if err := g.addFields(&s, t, path, 0, map[string]int{}, false); err != nil {
		return s, err
	}
	if len(s.Properties) == 0 && t.NumField() > 0 {
		return s, &TypeError{Path: path, Type: t, Reason: "none of its fields is seen by encoding/json (all unexported or json:\"-\")"}
	}
	return s, nil
}

// addFields adds t's JSON fields to s, inlining embedded structs as
// encoding/json does; depth is the embedding depth and depths the depth at
// which each property was found: a shallower field hides a deeper one. The
// fields of a struct embedded through a pointer are optional: a nil pointer
// writes none of them.
func (g *generator) addFields(s *apiextensionsv1.JSONSchemaProps, t reflect.Type, path string, depth int, depths map[string]int, optional bool) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fpath := path + "." + f.Name
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			if ft == typeTypeMeta {
				for _, p := range []string{"apiVersion", "kind"} {
					g.addProperty(s, p, apiextensionsv1.JSONSchemaProps{Type: "string"}, false, depth+1, depths)
				}
				continue
			}
			if err := g.addFields(s, ft, fpath, depth+1, depths, optional || f.Type.Kind() == reflect.Pointer); err != nil {
				return err
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if !f.Anonymous && strings.Contains(","+opts+",", ",inline,") {
			return &TypeError{Path: fpath, Type: f.Type, Reason: `json:",inline" on a named field: encoding/json does not inline it; embed the type instead`}
		}
		if name == "" {
			name = f.Name
		}
		var info fieldInfo
		if strings.Contains(f.Tag.Get("patchStrategy"), "merge") {
			info.mergeKey = f.Tag.Get("patchMergeKey")
		}
		fs, err := g.schema(f.Type, fpath, info)
		if err != nil {
			return err
		}
		if strings.Contains(","+opts+",", ",string,") {
			switch fs.Type {
			case "integer", "number", "boolean":
				fs = apiextensionsv1.JSONSchemaProps{Type: "string"} // encoding/json quotes it
			}
		}
		optional := optional || f.Type.Kind() == reflect.Pointer || strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")
		if err := g.addProperty(s, name, fs, !optional, depth, depths); err != nil {
			return &TypeError{Path: fpath, Type: f.Type, Reason: err.Error()}
		}
	}
	return nil
}

type conflictError string

func (e conflictError) Error() string { return string(e) }

// addProperty adds a property found at an embedding depth, following
// encoding/json: the shallowest field of a name wins, and two at the same
// depth are an error here (encoding/json would drop both silently).
func (g *generator) addProperty(s *apiextensionsv1.JSONSchemaProps, name string, p apiextensionsv1.JSONSchemaProps, required bool, depth int, depths map[string]int) error {
	if d, ok := depths[name]; ok {
		if d < depth {
			return nil
		}
		if d == depth {
			return conflictError("two fields at the same depth have the JSON name " + name)
		}
		s.Required = slices.DeleteFunc(s.Required, func(r string) bool { return r == name })
	}
	depths[name] = depth
	s.Properties[name] = p
	if required {
		s.Required = append(s.Required, name)
	}
	return nil
}

// isKubernetesAPIType reports whether t is a type of the Kubernetes API
// whose schema the server publishes.
func isKubernetesAPIType(t reflect.Type) bool {
	p := t.PkgPath()
	return t.Name() != "" && (strings.HasPrefix(p, "k8s.io/api/") || strings.HasPrefix(p, "k8s.io/apimachinery/"))
}

func dropDescriptions(s *apiextensionsv1.JSONSchemaProps) {
	s.Description = ""
	for name, p := range s.Properties {
		dropDescriptions(&p)
		s.Properties[name] = p
	}
	if s.Items != nil && s.Items.Schema != nil {
		dropDescriptions(s.Items.Schema)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		dropDescriptions(s.AdditionalProperties.Schema)
	}
}
