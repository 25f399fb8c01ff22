package crd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/openapi"
	"k8s.io/utils/ptr"
)

// serverSchemas gives the schemas of Kubernetes API types from the server's
// OpenAPI v3 documents, converted to structural schemas a CRD may hold. Each
// document is fetched once, when a type first needs it.
type serverSchemas struct {
	ctx       context.Context
	client    openapi.ClientWithContext
	paths     map[string]openapi.GroupVersionWithContext
	docs      map[string]map[string]map[string]any // path → definition name → schema
	converted map[string]apiextensionsv1.JSONSchemaProps
	known     map[string]apiextensionsv1.JSONSchemaProps
	stack     []string
}

func newServerSchemas(ctx context.Context, client openapi.Client) *serverSchemas {
	s := &serverSchemas{ctx: ctx, client: openapi.ToClientWithContext(client),
		docs: map[string]map[string]map[string]any{}, converted: map[string]apiextensionsv1.JSONSchemaProps{},
		known: map[string]apiextensionsv1.JSONSchemaProps{}}
	// The types with custom JSON keep the schemas this package gives them,
	// which are the ones a CRD accepts (the server's say "format: int-or-string").
	for _, t := range []reflect.Type{typeTime, typeMicroTime, typeDuration, typeQuantity, typeIntOrString, typeRawExtension, typeJSON, typeObjectMeta} {
		s.known[definitionName(t)], _ = knownSchema(t)
	}
	return s
}

// definitionName is the OpenAPI name of a Go type: k8s.io/api/batch/v1's
// JobTemplateSpec is io.k8s.api.batch.v1.JobTemplateSpec.
func definitionName(t reflect.Type) string {
	host, path, _ := strings.Cut(t.PkgPath(), "/")
	parts := strings.Split(host, ".")
	slices.Reverse(parts)
	return strings.Join(parts, ".") + "." + strings.ReplaceAll(path, "/", ".") + "." + t.Name()
}

// documentHint is the path of the OpenAPI v3 document that most likely holds
// t's schema: api/v1 for the core group and API machinery, apis/GROUP/VERSION
// when the package's directory is the group's name (batch, apps).
func documentHint(t reflect.Type) string {
	p := strings.TrimPrefix(t.PkgPath(), "k8s.io/api/")
	if p == t.PkgPath() || p == "core/v1" {
		return "api/v1"
	}
	return "apis/" + p
}

func (s *serverSchemas) schemaOf(t reflect.Type) (apiextensionsv1.JSONSchemaProps, error) {
	name := definitionName(t)
	schema, err := s.definition(name, documentHint(t))
	if err != nil {
		return schema, err
	}
	out := *schema.DeepCopy() // callers change what they get
	stripZeroDefaults(&out, nil)
	return out, nil
}

// stripZeroDefaults removes the defaults that are Go's zero value ("", 0,
// false), except on the optional keys of list maps (keys names them), whose
// items the server requires to have each key or a default for it. The server's
// document gives many fields their zero value as a default, which in a CRD
// would fill in a missing required field (a container without a name would
// get "" and pass) or contradict the field's enum.
func stripZeroDefaults(s *apiextensionsv1.JSONSchemaProps, keys []string) {
	for name, p := range s.Properties {
		// A list map's item needs each key or a default for it: a required
		// key needs none, and a default would make a missing one pass.
		if p.Default != nil && (!slices.Contains(keys, name) || slices.Contains(s.Required, name)) {
			switch string(p.Default.Raw) {
			case `""`, "0", "false":
				p.Default = nil
			}
		}
		stripZeroDefaults(&p, nil)
		s.Properties[name] = p
	}
	if s.Items != nil && s.Items.Schema != nil {
		stripZeroDefaults(s.Items.Schema, s.XListMapKeys)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		stripZeroDefaults(s.AdditionalProperties.Schema, nil)
	}
}

func (s *serverSchemas) definition(name, hint string) (apiextensionsv1.JSONSchemaProps, error) {
	if k, ok := s.known[name]; ok {
		return *k.DeepCopy(), nil
	}
	if c, ok := s.converted[name]; ok {
		return c, nil
	}
	if slices.Contains(s.stack, name) {
		return apiextensionsv1.JSONSchemaProps{}, fmt.Errorf("%w: %s contains itself: a recursive type has no structural schema", ErrUnsupportedType, name)
	}
	node, err := s.find(name, hint)
	if err != nil {
		return apiextensionsv1.JSONSchemaProps{}, err
	}
	s.stack = append(s.stack, name)
	c, err := s.convert(node)
	s.stack = s.stack[:len(s.stack)-1]
	if err != nil {
		return c, fmt.Errorf("%s: %w", name, err)
	}
	s.converted[name] = c
	return c, nil
}

// find returns the raw schema of a definition: from the hinted document, any
// document already read, or else every document in turn.
func (s *serverSchemas) find(name, hint string) (map[string]any, error) {
	if s.paths == nil {
		paths, err := s.client.PathsWithContext(s.ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: listing the server's OpenAPI v3 documents: %v", ErrSchemaSource, err)
		}
		s.paths = paths
	}
	if node, err := s.lookIn(hint, name); node != nil || err != nil {
		return node, err
	}
	for _, doc := range s.docs {
		if node := doc[name]; node != nil {
			return node, nil
		}
	}
	paths := make([]string, 0, len(s.paths))
	for p := range s.paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if node, err := s.lookIn(p, name); node != nil || err != nil {
			return node, err
		}
	}
	return nil, fmt.Errorf("%w %s", errNoDefinition, name)
}

// lookIn returns the named definition of one document, reading it first.
func (s *serverSchemas) lookIn(path, name string) (map[string]any, error) {
	doc, ok := s.docs[path]
	if !ok {
		gv, ok := s.paths[path]
		if !ok {
			return nil, nil
		}
		raw, err := gv.SchemaWithContext(s.ctx, "application/json")
		if err != nil {
			return nil, fmt.Errorf("%w: reading the server's OpenAPI v3 document %s: %v", ErrSchemaSource, path, err)
		}
		var parsed struct {
			Components struct {
				Schemas map[string]map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(raw, &parsed); err != nil {
			return nil, fmt.Errorf("%w: the server's OpenAPI v3 document %s does not parse: %v", ErrSchemaSource, path, err)
		}
		doc = parsed.Components.Schemas
		s.docs[path] = doc
	}
	return doc[name], nil
}

const refPrefix = "#/components/schemas/"

// errNoDefinition: no document of the server defines the type. A Go type
// the server does not publish (an API machinery type no built-in API uses)
// is then reflected; a reference inside a document that does not resolve is
// an error.
var errNoDefinition = errors.New("the server's OpenAPI v3 documents have no definition of")

// convert turns an OpenAPI v3 schema of the server into a structural schema
// for a CRD: references and single allOf wrappers resolved, the fields a CRD
// schema does not have dropped (patch strategies, unions), object defaults
// dropped (the server's "default: {}" says only that Go fills in a zero
// value), and everything that validates kept: types, formats, enums,
// required fields, bounds, patterns, list and map types.
func (s *serverSchemas) convert(node map[string]any) (apiextensionsv1.JSONSchemaProps, error) {
	str := func(k string) string { v, _ := node[k].(string); return v }
	var out apiextensionsv1.JSONSchemaProps
	var base map[string]any
	if ref := str("$ref"); ref != "" {
		base = map[string]any{"$ref": ref}
	} else if all, ok := node["allOf"].([]any); ok && len(all) == 1 {
		base, _ = all[0].(map[string]any)
	}
	if base != nil {
		if ref, ok := base["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, refPrefix)
			d, err := s.definition(name, "")
			if errors.Is(err, errNoDefinition) {
				return out, fmt.Errorf("%w: a reference that does not resolve: %v", ErrSchemaSource, err)
			}
			if err != nil {
				return out, err
			}
			out = *d.DeepCopy()
		} else {
			c, err := s.convert(base)
			if err != nil {
				return out, err
			}
			out = c
		}
		if d := str("description"); d != "" {
			out.Description = d
		}
		setDefault(&out, node["default"])
		return out, nil
	}
	if str("format") == "int-or-string" {
		out = intOrString()
		out.Description = str("description")
		return out, nil
	}
	out.Type, out.Format, out.Description, out.Pattern = str("type"), str("format"), str("description"), str("pattern")
	if enum, ok := node["enum"].([]any); ok {
		for _, e := range enum {
			out.Enum = append(out.Enum, apiextensionsv1.JSON{Raw: mustJSON(e)})
		}
	}
	for _, k := range []string{"minimum", "maximum"} {
		if f, ok := node[k].(float64); ok {
			if k == "minimum" {
				out.Minimum = &f
			} else {
				out.Maximum = &f
			}
		}
	}
	for k, dst := range map[string]**int64{"minLength": &out.MinLength, "maxLength": &out.MaxLength, "minItems": &out.MinItems, "maxItems": &out.MaxItems, "minProperties": &out.MinProperties, "maxProperties": &out.MaxProperties} {
		if f, ok := node[k].(float64); ok {
			*dst = ptr.To(int64(f))
		}
	}
	if req, ok := node["required"].([]any); ok {
		for _, r := range req {
			if r, ok := r.(string); ok {
				out.Required = append(out.Required, r)
			}
		}
	}
	if props, ok := node["properties"].(map[string]any); ok {
		out.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
		for name, p := range props {
			pm, _ := p.(map[string]any)
			c, err := s.convert(pm)
			if err != nil {
				return out, fmt.Errorf(".%s: %w", name, err)
			}
			out.Properties[name] = c
		}
	}
	if items, ok := node["items"].(map[string]any); ok {
		c, err := s.convert(items)
		if err != nil {
			return out, fmt.Errorf("[*]: %w", err)
		}
		out.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &c}
	}
	switch ap := node["additionalProperties"].(type) {
	case map[string]any:
		c, err := s.convert(ap)
		if err != nil {
			return out, fmt.Errorf("[*]: %w", err)
		}
		out.AdditionalProperties = &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &c}
	case bool:
		if ap {
			out.XPreserveUnknownFields = ptr.To(true)
		}
	}
	if v := str("x-kubernetes-list-type"); v != "" {
		out.XListType = &v
	}
	if keys, ok := node["x-kubernetes-list-map-keys"].([]any); ok {
		for _, k := range keys {
			if k, ok := k.(string); ok {
				out.XListMapKeys = append(out.XListMapKeys, k)
			}
		}
	}
	if v := str("x-kubernetes-map-type"); v != "" {
		out.XMapType = &v
	}
	if b, _ := node["x-kubernetes-preserve-unknown-fields"].(bool); b {
		out.XPreserveUnknownFields = ptr.To(true)
	}
	if b, _ := node["x-kubernetes-embedded-resource"].(bool); b {
		out.XEmbeddedResource = true
	}
	setDefault(&out, node["default"])
	if b, _ := node["x-kubernetes-int-or-string"].(bool); b {
		return intOrString(), nil
	}
	if out.Type == "" {
		// A structural schema gives every value a type, or says it may be anything.
		out.Type = "object"
		if len(out.Properties) == 0 && out.AdditionalProperties == nil {
			out.XPreserveUnknownFields = ptr.To(true)
		}
	}
	return out, nil
}

// setDefault keeps a scalar default of the server's schema that fits the
// enum (stripZeroDefaults then removes most of Go's zero values).
func setDefault(s *apiextensionsv1.JSONSchemaProps, def any) {
	switch def.(type) {
	case string, float64, bool:
	default:
		return
	}
	raw := mustJSON(def)
	if validate(s, raw, "") == nil {
		s.Default = &apiextensionsv1.JSON{Raw: raw}
	}
}

func mustJSON(v any) []byte {
	raw, _ := json.Marshal(v) // values decoded from JSON always marshal
	return raw
}
