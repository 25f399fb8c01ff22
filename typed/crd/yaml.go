package crd

import (
	"encoding/json"
	"fmt"
	"io"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/typedinformer/typedinformer/internal/guard"
)

// WriteYAML writes the CRDs to w as YAML documents separated by "---", what
// "kubectl apply -f" takes: with apiVersion and kind, without status or
// other fields the server sets. The values are not modified.
func WriteYAML(w io.Writer, crds ...*apiextensionsv1.CustomResourceDefinition) error {
	if guard.IsNil(w) {
		return fmt.Errorf("%w: nil writer", ErrInvalidDefinition)
	}
	for i, crd := range crds {
		if crd == nil {
			return fmt.Errorf("%w: CRD %d of %d is nil", ErrInvalidDefinition, i+1, len(crds))
		}
		c := crd.DeepCopy()
		c.APIVersion, c.Kind = apiextensionsv1.SchemeGroupVersion.String(), "CustomResourceDefinition"
		c.ResourceVersion, c.UID, c.Generation, c.ManagedFields = "", "", 0, nil
		// The server's fields (status, a null creationTimestamp) are not a user's to apply.
		raw, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("crd: writing CRD %s: %w", crd.Name, err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return fmt.Errorf("crd: writing CRD %s: %w", crd.Name, err)
		}
		delete(doc, "status")
		if meta, ok := doc["metadata"].(map[string]any); ok {
			delete(meta, "creationTimestamp")
		}
		out, err := yaml.Marshal(doc)
		if err != nil {
			return fmt.Errorf("crd: writing CRD %s: %w", crd.Name, err)
		}
		if i > 0 {
			out = append([]byte("---\n"), out...)
		}
		if _, err := w.Write(out); err != nil {
			return fmt.Errorf("crd: writing CRD %s: %w", crd.Name, err)
		}
	}
	return nil
}
