package crd

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/openapi"

	"github.com/typedinformer/typedinformer/internal/guard"
)

// Definition describes a custom resource: its names and scope, and its
// versions, each the schema of a Go type. Build turns it into a
// CustomResourceDefinition. The zero values of its optional fields are
// Kubernetes' conventions (see each field).
type Definition struct {
	// Group is the API group, such as "batch.tutorial.kubebuilder.io". Required.
	Group string
	// Kind is the kind, such as "CronJob". Required.
	Kind string
	// Plural is the resource name; by default the lower-case kind made plural
	// in English ("cronjobs", "policies", "ingresses").
	Plural string
	// Singular is by default the lower-case kind.
	Singular string
	// ListKind is by default Kind + "List".
	ListKind string
	// Scope is Namespaced (the default) or Cluster.
	Scope apiextensionsv1.ResourceScope
	// ShortNames and Categories are what kubectl accepts for the resource
	// ("kubectl get cj", "kubectl get all").
	ShortNames, Categories []string
	// Versions are the versions served, each from a Go type (VersionOf);
	// exactly one has Storage. Required.
	Versions []Version
	// NoServerDescriptions leaves the descriptions of the server's schemas
	// out (BuildFromServer, InstallDefinitions): the CronJob example's CRD,
	// which embeds a Job template, is 348 kB of JSON with them and 72 kB
	// without, and etcd stores at most about 1.5 MB per object, all versions
	// together (controller-gen's crd:maxDescLen=0).
	NoServerDescriptions bool
	// Conversion is how the server converts between versions: None (the default) only
	// changes apiVersion, which suits versions of one schema; versions whose Go types
	// differ need Webhook, a conversion webhook (typed/webhook's Converter). It is
	// copied into the CRD as it is.
	Conversion *apiextensionsv1.CustomResourceConversion
}

// Version is one version of a Definition, made by VersionOf.
type Version struct {
	name    string
	goType  reflect.Type
	typeErr error
	served  bool
	storage bool
	status  *bool
	scale   *apiextensionsv1.CustomResourceSubresourceScale
	columns []column
	fields  []field
	depr    *string
}

// VersionOption configures a Version: Storage, NotServed, Status, Scale,
// Column, Field, Deprecated.
type VersionOption func(*Version)

// VersionOf returns the version name of a Definition, whose schema is T's
// (T is the custom resource's Go type, normally a pointer to a struct that
// embeds metav1.TypeMeta and metav1.ObjectMeta). The version is served; the
// status subresource is on when T has a "status" field. Mistakes (T not a
// struct) are reported by Build, never by a panic.
func VersionOf[T runtime.Object](name string, opts ...VersionOption) Version {
	v := Version{name: name, goType: reflect.TypeFor[T](), served: true}
	for v.goType.Kind() == reflect.Pointer {
		v.goType = v.goType.Elem()
	}
	if v.goType.Kind() != reflect.Struct {
		v.typeErr = &TypeError{Path: v.goType.String(), Type: v.goType, Reason: "a custom resource's Go type must be a struct or a pointer to one"}
	}
	for _, o := range opts {
		if o != nil {
			o(&v)
		}
	}
	return v
}

// Storage makes the version the one objects are stored in; a Definition has
// exactly one.
func Storage() VersionOption { return func(v *Version) { v.storage = true } }

// NotServed makes the version not served by the API (it can still be the
// storage version while clients move on).
func NotServed() VersionOption { return func(v *Version) { v.served = false } }

// Deprecated marks the version deprecated; the server warns clients with
// warning, or with its default warning when warning is empty.
func Deprecated(warning string) VersionOption {
	return func(v *Version) {
		v.depr = &warning
	}
}

// Status turns the status subresource on or off, overriding the default (on
// when the Go type has a "status" field). With it on, writes of the object
// ignore its status and status writes ignore everything else.
func Status(enabled bool) VersionOption { return func(v *Version) { v.status = &enabled } }

// Scale turns the scale subresource on, for "kubectl scale" and the
// HorizontalPodAutoscaler. specReplicas and statusReplicas are JSON paths
// (".spec.replicas", ".status.replicas") of integer fields under .spec and
// .status; labelSelector, optional, is the JSON path of a string under
// .status holding the selector in its serialised form. Build checks the paths.
func Scale(specReplicas, statusReplicas, labelSelector string) VersionOption {
	return func(v *Version) {
		v.scale = &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: specReplicas, StatusReplicasPath: statusReplicas}
		if labelSelector != "" {
			v.scale.LabelSelectorPath = &labelSelector
		}
	}
}

type column struct {
	name, path string
	priority   int32
}

// Column adds a column to what "kubectl get" prints: the value at jsonPath,
// with the type and format the schema gives it (a date-time is a date, shown
// as an age). Build checks that the path exists. Columns show in the order
// added; priority 0 shows always, higher priorities only with -o wide.
func Column(name, jsonPath string, priority int32) VersionOption {
	return func(v *Version) {
		v.columns = append(v.columns, column{name: name, path: jsonPath, priority: priority})
	}
}

// Build returns the CustomResourceDefinition, with the schemas of embedded
// Kubernetes API types (corev1.PodSpec, say) found by reflection, which needs
// no server. It returns an error (matching one of the package's sentinels)
// for a definition that is incomplete or inconsistent, a Go type with no
// schema, or an option that does not fit the schema; the server would refuse
// such a CRD, or accept one that does not say what the Go code says.
func (d *Definition) Build() (*apiextensionsv1.CustomResourceDefinition, error) {
	return d.build(&generator{})
}

// BuildFromServer is Build, except that the schemas of embedded Kubernetes API
// types (Go packages under k8s.io/api and k8s.io/apimachinery) come from the
// server's OpenAPI v3 document (client is a discovery client's OpenAPIV3()),
// as controller-gen inlines them: with their enums, formats and list types,
// so the CRD refuses what the server refuses in a built-in object (a pod
// template's unknown restartPolicy, say). It fails with ErrSchemaSource when
// the server does not publish a type's schema.
func (d *Definition) BuildFromServer(ctx context.Context, client openapi.Client) (*apiextensionsv1.CustomResourceDefinition, error) {
	if guard.IsNil(client) {
		return nil, fmt.Errorf("%w: nil OpenAPI client", ErrSchemaSource)
	}
	return d.build(&generator{server: newServerSchemas(ctx, client)})
}

func (d *Definition) build(g *generator) (*apiextensionsv1.CustomResourceDefinition, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil Definition", ErrInvalidDefinition)
	}
	g.noDescriptions = d.NoServerDescriptions
	if d.Group == "" || d.Kind == "" {
		return nil, fmt.Errorf("%w: group and kind are required (got %q, %q)", ErrInvalidDefinition, d.Group, d.Kind)
	}
	names := apiextensionsv1.CustomResourceDefinitionNames{
		Plural: d.Plural, Singular: d.Singular, Kind: d.Kind, ListKind: d.ListKind,
		ShortNames: d.ShortNames, Categories: d.Categories,
	}
	if names.Singular == "" {
		names.Singular = strings.ToLower(d.Kind)
	}
	if names.Plural == "" {
		names.Plural = plural(strings.ToLower(d.Kind))
	}
	if names.ListKind == "" {
		names.ListKind = d.Kind + "List"
	}
	scope := d.Scope
	if scope == "" {
		scope = apiextensionsv1.NamespaceScoped
	}
	if scope != apiextensionsv1.NamespaceScoped && scope != apiextensionsv1.ClusterScoped {
		return nil, fmt.Errorf("%w: scope %q is neither Namespaced nor Cluster", ErrInvalidDefinition, scope)
	}
	if len(d.Versions) == 0 {
		return nil, fmt.Errorf("%w: %s has no version", ErrInvalidDefinition, d.Kind)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: names.Plural + "." + d.Group},
		Spec:       apiextensionsv1.CustomResourceDefinitionSpec{Group: d.Group, Names: names, Scope: scope},
	}
	var storage []string
	seen := map[string]bool{}
	for _, v := range d.Versions {
		if v.name == "" {
			return nil, fmt.Errorf("%w: a version of %s has no name (versions are made by VersionOf)", ErrInvalidDefinition, d.Kind)
		}
		if seen[v.name] {
			return nil, fmt.Errorf("%w: version %s is given twice", ErrInvalidDefinition, v.name)
		}
		seen[v.name] = true
		if v.storage {
			storage = append(storage, v.name)
		}
		cv, err := v.build(g)
		if err != nil {
			return nil, err
		}
		crd.Spec.Versions = append(crd.Spec.Versions, cv)
	}
	if len(storage) != 1 {
		return nil, fmt.Errorf("%w: exactly one version must be the storage version (crd.Storage()), got %d %v", ErrInvalidDefinition, len(storage), storage)
	}
	crd.Spec.Conversion = d.Conversion.DeepCopy()
	return crd, nil
}

// build returns the CRD version: its schema, with the options applied.
func (v *Version) build(g *generator) (apiextensionsv1.CustomResourceDefinitionVersion, error) {
	cv := apiextensionsv1.CustomResourceDefinitionVersion{Name: v.name, Served: v.served, Storage: v.storage}
	if v.typeErr != nil {
		return cv, v.typeErr
	}
	rootName, _, _ := strings.Cut(v.goType.Name(), "[") // a generic type's arguments would drown the path
	root, err := g.schema(v.goType, rootName, fieldInfo{})
	if err != nil {
		return cv, err
	}
	// The server owns metadata's schema; a CRD may say no more than its type.
	if _, ok := root.Properties["metadata"]; ok {
		root.Properties["metadata"] = apiextensionsv1.JSONSchemaProps{Type: "object"}
	}
	for _, f := range v.fields {
		// The server lets a CRD constrain these two of metadata's fields, and no other.
		for _, p := range []string{"name", "generateName"} {
			if _, ok := root.Properties["metadata"]; ok && (f.path == ".metadata."+p) {
				meta := root.Properties["metadata"]
				if meta.Properties == nil {
					meta.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
				}
				if _, ok := meta.Properties[p]; !ok {
					meta.Properties[p] = apiextensionsv1.JSONSchemaProps{Type: "string"}
				}
				root.Properties["metadata"] = meta
			}
		}
		if err := f.apply(&root); err != nil {
			return cv, &PathError{Version: v.name, Path: f.path, Err: err}
		}
	}
	status := root.Properties["status"].Type == "object"
	if v.status != nil {
		status = *v.status
	}
	if status || v.scale != nil {
		cv.Subresources = &apiextensionsv1.CustomResourceSubresources{}
	}
	if status {
		cv.Subresources.Status = &apiextensionsv1.CustomResourceSubresourceStatus{}
	}
	if v.scale != nil {
		if err := checkScale(&root, v.scale); err != nil {
			return cv, &PathError{Version: v.name, Path: "scale", Err: err}
		}
		cv.Subresources.Scale = v.scale
	}
	for _, c := range v.columns {
		col, err := columnOf(&root, c)
		if err != nil {
			return cv, &PathError{Version: v.name, Path: c.path, Err: err}
		}
		cv.AdditionalPrinterColumns = append(cv.AdditionalPrinterColumns, col)
	}
	if v.depr != nil {
		cv.Deprecated = true
		if *v.depr != "" {
			cv.DeprecationWarning = v.depr
		}
	}
	cv.Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &root}
	return cv, nil
}

func checkScale(root *apiextensionsv1.JSONSchemaProps, s *apiextensionsv1.CustomResourceSubresourceScale) error {
	check := func(path, under, typ string) error {
		if !strings.HasPrefix(path, under+".") {
			return invalid("scale path %s is not under %s", path, under)
		}
		p, err := lookup(root, path)
		if err != nil {
			return err
		}
		if p.Type != typ {
			return invalid("scale path %s is a %s, not a %s", path, describe(p), typ)
		}
		return nil
	}
	if err := check(s.SpecReplicasPath, ".spec", "integer"); err != nil {
		return err
	}
	if err := check(s.StatusReplicasPath, ".status", "integer"); err != nil {
		return err
	}
	if s.LabelSelectorPath != nil {
		if err := check(*s.LabelSelectorPath, ".status", "string"); err != nil {
			return err
		}
	}
	return nil
}

// columnOf returns a printer column, its type and format from the schema.
func columnOf(root *apiextensionsv1.JSONSchemaProps, c column) (apiextensionsv1.CustomResourceColumnDefinition, error) {
	col := apiextensionsv1.CustomResourceColumnDefinition{Name: c.name, JSONPath: c.path, Priority: c.priority}
	if c.name == "" {
		return col, invalid("a column needs a name")
	}
	switch {
	case c.path == ".metadata.creationTimestamp" || c.path == ".metadata.deletionTimestamp":
		col.Type = "date"
		return col, nil
	case c.path == ".metadata.name" || c.path == ".metadata.namespace" || c.path == ".metadata.generateName":
		col.Type = "string"
		return col, nil
	}
	p, err := lookup(root, c.path)
	if err != nil {
		return col, err
	}
	switch {
	case p.Type == "string" && p.Format == "date-time":
		col.Type = "date"
	case p.Type == "integer" || p.Type == "number" || p.Type == "boolean" || p.Type == "string":
		col.Type = p.Type
	default:
		col.Type = "string" // kubectl prints other values as JSON
	}
	return col, nil
}

// plural makes a lower-case English noun plural, as kubebuilder does.
func plural(s string) string {
	switch {
	case strings.HasSuffix(s, "s"), strings.HasSuffix(s, "x"), strings.HasSuffix(s, "z"),
		strings.HasSuffix(s, "ch"), strings.HasSuffix(s, "sh"):
		return s + "es"
	case strings.HasSuffix(s, "y") && len(s) > 1 && !strings.ContainsRune("aeiou", rune(s[len(s)-2])):
		return s[:len(s)-1] + "ies"
	}
	return s + "s"
}
