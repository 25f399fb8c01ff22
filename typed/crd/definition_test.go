package crd_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/openapi/openapitest"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

func TestNamesFollowKubernetesConventions(t *testing.T) {
	for kind, plural := range map[string]string{"Thing": "things", "Policy": "policies", "Gateway": "gateways", "Ingress": "ingresses", "Box": "boxes", "Match": "matches"} {
		c, err := (&crd.Definition{Group: "g.example.com", Kind: kind, Versions: []crd.Version{crd.VersionOf[*thing]("v1", crd.Storage())}}).Build()
		if err != nil {
			t.Fatal(err)
		}
		want := apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List"}
		if diff := cmp.Diff(want, c.Spec.Names); diff != "" || c.Name != plural+".g.example.com" || c.Spec.Scope != apiextensionsv1.NamespaceScoped {
			t.Errorf("%s: name %s, scope %s, names (-want +got):\n%s", kind, c.Name, c.Spec.Scope, diff)
		}
	}
}

func TestAVersionsSubresourcesColumnsAndOptions(t *testing.T) {
	d := &crd.Definition{Group: "g.example.com", Kind: "Thing", Scope: apiextensionsv1.ClusterScoped, ShortNames: []string{"th"}, Categories: []string{"all"},
		Versions: []crd.Version{
			crd.VersionOf[*thing]("v1beta1", crd.NotServed(), crd.Status(false), crd.Deprecated("use v1")),
			crd.VersionOf[*thing]("v1", crd.Storage(), crd.Scale(".spec.replicas", ".status.replicas", ".status.selector"),
				crd.Column("Replicas", ".spec.replicas", 0), crd.Column("Since", ".status.since", 1), crd.Column("Tags", ".spec.tags", 1), crd.Column("Age", ".metadata.creationTimestamp", 0),
				crd.Field(".spec.name", crd.MinLength(1), crd.MaxLength(63), crd.Pattern("^[a-z]+$"), crd.Description("the name"), crd.Optional()),
				crd.Field(".spec.replicas", crd.Minimum(0), crd.Maximum(10), crd.Default(1), crd.Required()),
				crd.Field(".spec.policy", crd.Enum("A"), crd.Default("A")),
				crd.Field(".spec.tags", crd.MinItems(1), crd.MaxItems(3)),
				crd.Field(".spec.tags[*]", crd.Format("hostname")),
				crd.Field(".spec.labels[*]", crd.MaxLength(8)),
				crd.Field(".", crd.Rule("self.spec.replicas <= 5 || self.spec.name != ''", "big things need a name")),
			)}}
	c, err := d.Build()
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.Scope != apiextensionsv1.ClusterScoped || !cmp.Equal(c.Spec.Names.ShortNames, []string{"th"}) || !cmp.Equal(c.Spec.Names.Categories, []string{"all"}) {
		t.Errorf("scope %s, names %+v", c.Spec.Scope, c.Spec.Names)
	}
	beta, v1 := c.Spec.Versions[0], c.Spec.Versions[1]
	if beta.Served || beta.Storage || beta.Subresources != nil || !beta.Deprecated || ptr.Deref(beta.DeprecationWarning, "") != "use v1" {
		t.Errorf("v1beta1: served %v, storage %v, subresources %+v, deprecated %v %v; want not served, not stored, no status, deprecated with a warning",
			beta.Served, beta.Storage, beta.Subresources, beta.Deprecated, beta.DeprecationWarning)
	}
	wantSub := &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
		Scale: &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas", LabelSelectorPath: ptr.To(".status.selector")}}
	if diff := cmp.Diff(wantSub, v1.Subresources); diff != "" || !v1.Served || !v1.Storage {
		t.Errorf("v1: served %v, storage %v, subresources (-want +got):\n%s", v1.Served, v1.Storage, diff)
	}
	wantCols := []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"},
		{Name: "Since", Type: "date", JSONPath: ".status.since", Priority: 1},
		{Name: "Tags", Type: "string", JSONPath: ".spec.tags", Priority: 1},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}
	if diff := cmp.Diff(wantCols, v1.AdditionalPrinterColumns); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	root := v1.Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	wantSpec := apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"replicas"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"name":     {Type: "string", MinLength: ptr.To[int64](1), MaxLength: ptr.To[int64](63), Pattern: "^[a-z]+$", Description: "the name"},
		"replicas": {Type: "integer", Format: "int32", Minimum: ptr.To(0.0), Maximum: ptr.To(10.0), Default: &apiextensionsv1.JSON{Raw: []byte("1")}},
		"policy":   {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"A"`)}}, Default: &apiextensionsv1.JSON{Raw: []byte(`"A"`)}},
		"tags":     {Type: "array", MinItems: ptr.To[int64](1), MaxItems: ptr.To[int64](3), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", Format: "hostname"}}},
		"labels":   {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr.To[int64](8)}}},
	}}
	if diff := cmp.Diff(wantSpec, spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if want := (apiextensionsv1.ValidationRules{{Rule: "self.spec.replicas <= 5 || self.spec.name != ''", Message: "big things need a name"}}); !cmp.Equal(want, root.XValidations) {
		t.Errorf("root rules: %v, want %v", root.XValidations, want)
	}
	t.Run("building does not change the Definition: a second Build is equal", func(t *testing.T) {
		again, err := d.Build()
		if err != nil || !cmp.Equal(c, again) {
			t.Errorf("second Build differs: %v\n%s", err, cmp.Diff(c, again))
		}
	})
}

func TestWriteYAMLWritesWhatKubectlApplyReads(t *testing.T) {
	a, err := (&crd.Definition{Group: "g.example.com", Kind: "Thing", Versions: []crd.Version{crd.VersionOf[*thing]("v1", crd.Storage())}}).Build()
	if err != nil {
		t.Fatal(err)
	}
	b := a.DeepCopy()
	b.Name, b.Spec.Names.Plural, b.Spec.Names.Kind = "others.g.example.com", "others", "Other"
	b.Status.StoredVersions = []string{"v1"} // the server's: not written
	var buf bytes.Buffer
	if err := crd.WriteYAML(&buf, a, b); err != nil {
		t.Fatal(err)
	}
	for _, unwanted := range []string{"\nstatus:", "creationTimestamp:", "storedVersions:"} {
		if strings.Contains(buf.String(), unwanted) {
			t.Errorf("the YAML has %s:\n%s", unwanted, buf.String())
		}
	}
	// testenv reads CRD files strictly, as the API server does.
	parsed, err := testenv.ParseCRDs(buf.Bytes(), "the YAML")
	if err != nil {
		t.Fatal(err)
	}
	b.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	if diff := cmp.Diff([]*apiextensionsv1.CustomResourceDefinition{a, b}, parsed); diff != "" {
		t.Errorf("read back (-written +read):\n%s", diff)
	}
	if err := crd.WriteYAML(&buf, nil); !errors.Is(err, crd.ErrInvalidDefinition) {
		t.Errorf("WriteYAML of a nil CRD: %v, want ErrInvalidDefinition", err)
	}
	if err := crd.WriteYAML((*bytes.Buffer)(nil), a); !errors.Is(err, crd.ErrInvalidDefinition) {
		t.Errorf("WriteYAML to a typed nil writer: %v, want ErrInvalidDefinition", err)
	}
}

// jobHolder embeds a built-in API type, whose schema BuildFromServer takes
// from the server's OpenAPI.
type jobHolder struct {
	Job batchv1.JobTemplateSpec `json:"job"`
}

func TestBuildFromServerInlinesTheServersSchemaOfBuiltInTypes(t *testing.T) {
	// client-go's copy of a server's OpenAPI v3 documents (api/v1, apis/batch/v1, ...).
	d := &crd.Definition{Group: "g.example.com", Kind: "Thing", Versions: []crd.Version{crd.VersionOf[*object[jobHolder]]("v1", crd.Storage(),
		crd.Field(".spec.job.spec.template.spec.containers[*].name", crd.MaxLength(63)))}}
	c, err := d.BuildFromServer(context.Background(), openapitest.NewEmbeddedFileClient())
	if err != nil {
		t.Fatal(err)
	}
	job := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["job"]
	if job.Description == "" || job.Properties["spec"].Description == "" {
		t.Errorf("the server's descriptions are missing: %q", job.Description)
	}
	meta := job.Properties["spec"].Properties["template"].Properties["metadata"]
	if _, ok := meta.Properties["labels"]; !ok || meta.Type != "object" {
		t.Errorf("a pod template's metadata: %+v; want an object with labels (ObjectMeta keeps this package's schema)", meta)
	}
	containers := job.Properties["spec"].Properties["template"].Properties["spec"].Properties["containers"]
	if !cmp.Equal(containers.Items.Schema.Required, []string{"name"}) {
		t.Errorf("a container's required fields: %v, want the server's [name]", containers.Items.Schema.Required)
	}
	name := containers.Items.Schema.Properties["name"]
	if name.Default != nil || ptr.Deref(name.MaxLength, 0) != 63 {
		t.Errorf("a container's name: default %v, max length %v; want no default (the server's zero value is dropped) and the Field's 63", name.Default, name.MaxLength)
	}
	port := containers.Items.Schema.Properties["ports"].Items.Schema
	if got := port.Properties["containerPort"]; got.Type != "integer" || got.Format != "int32" {
		t.Errorf("containerPort: %+v, want an int32 integer", got)
	}
	var hasQuantity bool
	limits := containers.Items.Schema.Properties["resources"].Properties["limits"]
	if q := limits.AdditionalProperties.Schema; q.XIntOrString && len(q.AnyOf) == 2 && q.Pattern != "" {
		hasQuantity = true
	}
	if !hasQuantity {
		t.Errorf("resource limits: %+v, want quantities as int-or-string with a pattern", limits.AdditionalProperties.Schema)
	}
	t.Run("NoServerDescriptions leaves the server's descriptions out", func(t *testing.T) {
		short := *d
		short.NoServerDescriptions = true
		c, err := short.BuildFromServer(context.Background(), openapitest.NewEmbeddedFileClient())
		if err != nil {
			t.Fatal(err)
		}
		var long, without bytes.Buffer
		if err := crd.WriteYAML(&without, c); err != nil {
			t.Fatal(err)
		}
		full, _ := d.BuildFromServer(context.Background(), openapitest.NewEmbeddedFileClient())
		_ = crd.WriteYAML(&long, full)
		if strings.Contains(without.String(), "description:") || without.Len() >= long.Len()/2 {
			t.Errorf("without descriptions: %d bytes (with: %d), descriptions left: %v", without.Len(), long.Len(), strings.Contains(without.String(), "description:"))
		}
	})
	t.Run("a type the server does not publish is reflected", func(t *testing.T) {
		fromServer, err := d.BuildFromServer(context.Background(), fakeOpenAPI{})
		if err != nil {
			t.Fatal(err)
		}
		reflected, err := d.Build()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(reflected, fromServer); diff != "" {
			t.Errorf("(-reflected +from a server without documents):\n%s", diff)
		}
	})
	t.Run("a server whose documents cannot be read is ErrSchemaSource naming the field", func(t *testing.T) {
		_, err := d.BuildFromServer(context.Background(), fakeOpenAPI{err: errors.New("connection refused")})
		if !errors.Is(err, crd.ErrSchemaSource) || !strings.Contains(err.Error(), "object.Spec.Job") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("BuildFromServer: %v; want ErrSchemaSource naming object.Spec.Job and the cause", err)
		}
	})
	t.Run("a nil or typed nil client is ErrSchemaSource", func(t *testing.T) {
		if _, err := d.BuildFromServer(context.Background(), nil); !errors.Is(err, crd.ErrSchemaSource) {
			t.Errorf("BuildFromServer(nil): %v; want ErrSchemaSource", err)
		}
		if _, err := d.BuildFromServer(context.Background(), (*fakeOpenAPI)(nil)); !errors.Is(err, crd.ErrSchemaSource) {
			t.Errorf("BuildFromServer(typed nil): %v; want ErrSchemaSource", err)
		}
	})
}

// fakeOpenAPI is a server with no OpenAPI documents, or whose documents
// cannot be listed.
type fakeOpenAPI struct{ err error }

func (f fakeOpenAPI) Paths() (map[string]openapi.GroupVersion, error) { return nil, f.err }

func TestConversionIsCopiedIntoTheCRDNotShared(t *testing.T) {
	conv := &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
		ConversionReviewVersions: []string{"v1"},
		ClientConfig:             &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{Namespace: "ns", Name: "svc", Path: ptr.To("/convert")}}}}
	d := &crd.Definition{Group: "g.example.com", Kind: "Thing", Conversion: conv,
		Versions: []crd.Version{crd.VersionOf[*thing]("v1", crd.Storage()), crd.VersionOf[*thing]("v2")}}
	c, err := d.Build()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(conv, c.Spec.Conversion); diff != "" {
		t.Errorf("conversion (-want +got):\n%s", diff)
	}
	c.Spec.Conversion.Webhook.ClientConfig.Service.Name = "changed"
	if conv.Webhook.ClientConfig.Service.Name != "svc" {
		t.Error("the built CRD shares the Definition's Conversion")
	}
	if c, err = (&crd.Definition{Group: "g.example.com", Kind: "Thing", Versions: []crd.Version{crd.VersionOf[*thing]("v1", crd.Storage())}}).Build(); err != nil || c.Spec.Conversion != nil {
		t.Errorf("no Conversion: got %+v, %v; want none (the server's default, None)", c.Spec.Conversion, err)
	}
}
