package crd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
)

// field is a Field option: constraints for the schema at a JSON path.
type field struct {
	path        string
	constraints []Constraint
}

// Field adds validation to the schema at a JSON path of the version's object:
// "." is the object itself, ".spec.schedule" a field, ".spec.items[*]" the
// items of a list or the values of a map. Of the root's metadata, whose schema
// the server owns, only .metadata.name and .metadata.generateName may be
// constrained (a maximum length, a pattern). Build fails with ErrUnknownPath
// when the path is not in the schema, and with ErrInvalidValue when a
// constraint does not fit the schema there (a Minimum on a string, a Default
// of another type), so no option is ignored silently.
func Field(path string, constraints ...Constraint) VersionOption {
	return func(v *Version) { v.fields = append(v.fields, field{path: path, constraints: constraints}) }
}

// Constraint is a validation rule for the schema at one path, given to Field.
type Constraint struct {
	name  string
	apply func(s, parent *apiextensionsv1.JSONSchemaProps, name string) error
}

func (f field) apply(root *apiextensionsv1.JSONSchemaProps) error {
	return at(root, f.path, func(s, parent *apiextensionsv1.JSONSchemaProps, name string) error {
		for _, c := range f.constraints {
			if c.apply == nil {
				return invalid("a zero Constraint (use the package's functions)")
			}
			if err := c.apply(s, parent, name); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
		}
		return nil
	})
}

// lookup returns a copy of the schema at a JSON path.
func lookup(root *apiextensionsv1.JSONSchemaProps, path string) (apiextensionsv1.JSONSchemaProps, error) {
	var found apiextensionsv1.JSONSchemaProps
	err := at(root, path, func(s, _ *apiextensionsv1.JSONSchemaProps, _ string) error {
		found = *s
		return nil
	})
	return found, err
}

// at calls fn with the schema at path, its parent object's schema and its
// property name (nil and "" for the root and for items), and keeps what fn
// changes.
func at(root *apiextensionsv1.JSONSchemaProps, path string, fn func(s, parent *apiextensionsv1.JSONSchemaProps, name string) error) error {
	segs, err := splitPath(path)
	if err != nil {
		return err
	}
	return walk(root, segs, nil, "", fn)
}

func splitPath(path string) ([]string, error) {
	if path == "" || path == "." {
		return nil, nil
	}
	if !strings.HasPrefix(path, ".") && !strings.HasPrefix(path, "[") {
		return nil, fmt.Errorf("%w: a path starts with a dot, as in .spec.replicas", ErrUnknownPath)
	}
	var segs []string
	for _, part := range strings.Split(strings.TrimPrefix(path, "."), ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name != "" {
			segs = append(segs, name)
		} else if rest == "" {
			return nil, fmt.Errorf("%w: empty field name", ErrUnknownPath)
		}
		if rest != "" {
			for _, idx := range strings.Split("["+rest, "[")[1:] {
				if idx != "*]" {
					return nil, fmt.Errorf("%w: [%s: only [*] (every item or value) is a path step", ErrUnknownPath, idx)
				}
				segs = append(segs, "[*]")
			}
		}
	}
	return segs, nil
}

func walk(s *apiextensionsv1.JSONSchemaProps, segs []string, parent *apiextensionsv1.JSONSchemaProps, name string, fn func(s, parent *apiextensionsv1.JSONSchemaProps, name string) error) error {
	if len(segs) == 0 {
		return fn(s, parent, name)
	}
	seg := segs[0]
	if seg == "[*]" {
		switch {
		case s.Items != nil && s.Items.Schema != nil:
			return walk(s.Items.Schema, segs[1:], nil, "", fn)
		case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
			return walk(s.AdditionalProperties.Schema, segs[1:], nil, "", fn)
		}
		return fmt.Errorf("%w: [*] steps into a list or a map, not into a %s", ErrUnknownPath, describe(*s))
	}
	p, ok := s.Properties[seg]
	if !ok {
		known := make([]string, 0, len(s.Properties))
		for k := range s.Properties {
			known = append(known, k)
		}
		sort.Strings(known)
		return fmt.Errorf("%w: no field %q here (fields: %s)", ErrUnknownPath, seg, strings.Join(known, ", "))
	}
	err := walk(&p, segs[1:], s, seg, fn)
	s.Properties[seg] = p
	return err
}

// describe names a schema's type for messages.
func describe(s apiextensionsv1.JSONSchemaProps) string {
	switch {
	case s.XIntOrString:
		return "int-or-string"
	case s.Type != "":
		return s.Type
	}
	return "value of any type"
}

func numeric(s *apiextensionsv1.JSONSchemaProps) error {
	if s.Type != "integer" && s.Type != "number" {
		return invalid("the schema here is a %s, not a number", describe(*s))
	}
	return nil
}

func ofType(typ string) func(s *apiextensionsv1.JSONSchemaProps) error {
	return func(s *apiextensionsv1.JSONSchemaProps) error {
		if s.Type != typ {
			return invalid("the schema here is a %s, not a %s", describe(*s), typ)
		}
		return nil
	}
}

// constraint makes a Constraint that checks the schema with check and then
// changes it with set.
func constraint(name string, check func(*apiextensionsv1.JSONSchemaProps) error, set func(*apiextensionsv1.JSONSchemaProps) error) Constraint {
	return Constraint{name: name, apply: func(s, _ *apiextensionsv1.JSONSchemaProps, _ string) error {
		if check != nil {
			if err := check(s); err != nil {
				return err
			}
		}
		return set(s)
	}}
}

// Minimum makes values below min invalid (an integer or a number).
func Minimum(min float64) Constraint {
	return constraint("Minimum", numeric, func(s *apiextensionsv1.JSONSchemaProps) error { s.Minimum = &min; return nil })
}

// Maximum makes values above max invalid (an integer or a number).
func Maximum(max float64) Constraint {
	return constraint("Maximum", numeric, func(s *apiextensionsv1.JSONSchemaProps) error { s.Maximum = &max; return nil })
}

// MinLength makes strings shorter than n characters invalid.
func MinLength(n int64) Constraint {
	return constraint("MinLength", ofType("string"), func(s *apiextensionsv1.JSONSchemaProps) error { s.MinLength = &n; return nil })
}

// MaxLength makes strings longer than n characters invalid. CEL rules need
// it (or an enum) to estimate their cost on strings.
func MaxLength(n int64) Constraint {
	return constraint("MaxLength", ofType("string"), func(s *apiextensionsv1.JSONSchemaProps) error { s.MaxLength = &n; return nil })
}

// MinItems makes lists with fewer than n items invalid.
func MinItems(n int64) Constraint {
	return constraint("MinItems", ofType("array"), func(s *apiextensionsv1.JSONSchemaProps) error { s.MinItems = &n; return nil })
}

// MaxItems makes lists with more than n items invalid.
func MaxItems(n int64) Constraint {
	return constraint("MaxItems", ofType("array"), func(s *apiextensionsv1.JSONSchemaProps) error { s.MaxItems = &n; return nil })
}

// Pattern makes strings that do not match the regular expression re invalid.
// re must compile (Go's syntax, which the API server uses too).
func Pattern(re string) Constraint {
	return constraint("Pattern", ofType("string"), func(s *apiextensionsv1.JSONSchemaProps) error {
		if _, err := regexp.Compile(re); err != nil {
			return invalid("pattern %q: %v", re, err)
		}
		s.Pattern = re
		return nil
	})
}

// Format sets the schema's format, such as "date-time", "uri" or "uuid",
// which the server checks for strings.
func Format(format string) Constraint {
	return constraint("Format", nil, func(s *apiextensionsv1.JSONSchemaProps) error { s.Format = format; return nil })
}

// Description sets the schema's description, which "kubectl explain" shows
// (Go doc comments are not available at run time).
func Description(text string) Constraint {
	return constraint("Description", nil, func(s *apiextensionsv1.JSONSchemaProps) error { s.Description = text; return nil })
}

// Enum makes every value but these invalid. Each is marshalled to JSON and
// must fit the schema (a string for a string field), and replaces an enum the
// Go type stated (Enumerated).
func Enum(values ...any) Constraint {
	return constraint("Enum", nil, func(s *apiextensionsv1.JSONSchemaProps) error {
		if len(values) == 0 {
			return invalid("no values")
		}
		plain := *s
		plain.Enum = nil
		var enum []apiextensionsv1.JSON
		for _, v := range values {
			raw, err := json.Marshal(v)
			if err != nil {
				return invalid("value %v does not marshal: %v", v, err)
			}
			if err := validate(&plain, raw, ""); err != nil {
				return err
			}
			enum = append(enum, apiextensionsv1.JSON{Raw: raw})
		}
		s.Enum = enum
		return nil
	})
}

// Default sets the value the server writes into an object that does not have
// the field (when it is created, and when it is read from storage). value is
// marshalled to JSON and must be valid against the schema there, as the
// server requires.
func Default(value any) Constraint {
	return constraint("Default", nil, func(s *apiextensionsv1.JSONSchemaProps) error {
		raw, err := json.Marshal(value)
		if err != nil {
			return invalid("default %v does not marshal: %v", value, err)
		}
		if err := validate(s, raw, ""); err != nil {
			return err
		}
		s.Default = &apiextensionsv1.JSON{Raw: raw}
		return nil
	})
}

// Rule adds a CEL validation rule (x-kubernetes-validations) to the schema
// at the path, where self is the value there; message is what the server
// answers when the rule is false. At the root (Field(".", ...)), a rule can
// relate fields of spec to each other. The server compiles the rule when the
// CRD is installed and refuses the CRD if it does not compile.
func Rule(rule, message string) Constraint {
	return constraint("Rule", nil, func(s *apiextensionsv1.JSONSchemaProps) error {
		if strings.TrimSpace(rule) == "" {
			return invalid("empty rule")
		}
		s.XValidations = append(s.XValidations, apiextensionsv1.ValidationRule{Rule: rule, Message: message})
		return nil
	})
}

// Optional makes the field at the path optional, whatever its JSON tag says.
func Optional() Constraint { return required(false) }

// Required makes the field at the path required, whatever its JSON tag says.
func Required() Constraint { return required(true) }

func required(req bool) Constraint {
	return Constraint{name: "Required", apply: func(_, parent *apiextensionsv1.JSONSchemaProps, name string) error {
		if parent == nil {
			return invalid("only an object's field can be required or optional")
		}
		parent.Required = slices.DeleteFunc(parent.Required, func(r string) bool { return r == name })
		if req {
			parent.Required = append(parent.Required, name)
		}
		return nil
	}}
}

// validate checks a JSON value against a schema, as far as the server's
// checks of defaults go for the schemas this package builds: types, fields,
// required fields, enums and patterns.
func validate(s *apiextensionsv1.JSONSchemaProps, raw []byte, where string) error {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return invalid("%s: %v", or(where, "value"), err)
	}
	return check(s, v, where)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func check(s *apiextensionsv1.JSONSchemaProps, v any, where string) error {
	wrong := func() error {
		raw, _ := json.Marshal(v)
		return invalid("%s %s is not a %s", or(where, "value"), raw, describe(*s))
	}
	if v == nil {
		if s.Nullable {
			return nil
		}
		return invalid("%s is null, which the schema does not allow", or(where, "value"))
	}
	if len(s.Enum) > 0 {
		raw, _ := json.Marshal(v)
		if !slices.ContainsFunc(s.Enum, func(e apiextensionsv1.JSON) bool { return bytes.Equal(compact(e.Raw), raw) }) {
			return invalid("%s %s is not one of the enum's values", or(where, "value"), raw)
		}
	}
	switch {
	case s.XIntOrString:
		switch n := v.(type) {
		case string:
		case json.Number:
			if _, err := n.Int64(); err != nil {
				return wrong()
			}
		default:
			return wrong()
		}
		return nil
	case s.Type == "" && ptr.Deref(s.XPreserveUnknownFields, false):
		return nil
	}
	switch s.Type {
	case "string":
		str, ok := v.(string)
		if !ok {
			return wrong()
		}
		if s.Pattern != "" {
			if re, err := regexp.Compile(s.Pattern); err == nil && !re.MatchString(str) {
				return invalid("%s %q does not match the pattern %s", or(where, "value"), str, s.Pattern)
			}
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return wrong()
		}
		if _, err := n.Int64(); err != nil {
			return wrong()
		}
		return bounds(s, n, where)
	case "number":
		n, ok := v.(json.Number)
		if !ok {
			return wrong()
		}
		return bounds(s, n, where)
	case "boolean":
		if _, ok := v.(bool); !ok {
			return wrong()
		}
	case "array":
		items, ok := v.([]any)
		if !ok {
			return wrong()
		}
		for i, item := range items {
			if s.Items != nil && s.Items.Schema != nil {
				if err := check(s.Items.Schema, item, fmt.Sprintf("%s[%d]", where, i)); err != nil {
					return err
				}
			}
		}
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong()
		}
		for _, r := range s.Required {
			if _, ok := obj[r]; !ok {
				return invalid("%s has no %s, which is required", or(where, "value"), r)
			}
		}
		for k, fv := range obj {
			fs, ok := s.Properties[k]
			switch {
			case ok:
			case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
				fs = *s.AdditionalProperties.Schema
			case ptr.Deref(s.XPreserveUnknownFields, false):
				continue
			default:
				return invalid("%s has a field %s that the schema does not have", or(where, "value"), k)
			}
			if err := check(&fs, fv, where+"."+k); err != nil {
				return err
			}
		}
	}
	return nil
}

func bounds(s *apiextensionsv1.JSONSchemaProps, n json.Number, where string) error {
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) {
		return invalid("%s %s is not a number", or(where, "value"), n)
	}
	if s.Minimum != nil && f < *s.Minimum || s.Maximum != nil && f > *s.Maximum {
		return invalid("%s %s is out of the schema's bounds", or(where, "value"), n)
	}
	return nil
}

func compact(raw []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}
