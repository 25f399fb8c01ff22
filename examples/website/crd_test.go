package website_test

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/typedinformer/typedinformer/examples/website"
)

// A replica that does not serve the conversion webhook installs v1 alone: with v2
// listed, every read of v2 (kubectl's preferred version) would fail for want of it.
func TestTheCRDHasV2OnlyWithItsConversionWebhook(t *testing.T) {
	for _, c := range []struct {
		webhooks bool
		versions []string
		strategy apiextensionsv1.ConversionStrategyType
	}{
		{true, []string{"v1", "v2"}, apiextensionsv1.WebhookConverter},
		{false, []string{"v1"}, apiextensionsv1.NoneConverter},
	} {
		built, err := website.DefinitionFor(c.webhooks).Build()
		if err != nil {
			t.Fatalf("DefinitionFor(%v).Build() = %v", c.webhooks, err)
		}
		var versions []string
		for _, v := range built.Spec.Versions {
			versions = append(versions, v.Name)
			if v.Name == "v1" && (!v.Storage || !v.Served) {
				t.Errorf("DefinitionFor(%v): v1 is not the served storage version: %+v", c.webhooks, v)
			}
		}
		strategy := apiextensionsv1.NoneConverter
		if built.Spec.Conversion != nil {
			strategy = built.Spec.Conversion.Strategy
		}
		if len(versions) != len(c.versions) || versions[0] != "v1" || strategy != c.strategy {
			t.Errorf("DefinitionFor(%v): versions %v, conversion %q; want %v, %q", c.webhooks, versions, strategy, c.versions, c.strategy)
		}
	}
	if d := website.DefinitionV1(); len(d.Versions) != 1 || d.Conversion != nil {
		t.Errorf("DefinitionV1 = %d versions, conversion %v; want v1 alone, none", len(d.Versions), d.Conversion)
	}
	if d := website.Definition(); len(d.Versions) != 2 {
		t.Errorf("DefinitionV1 changed Definition's versions: %d", len(d.Versions))
	}
}
