package webhook_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// applyPatch applies a JSON patch of add, replace and remove operations to doc, as the
// API server would, failing t on an operation the server would refuse: a replace or
// remove of a missing member, an add under a missing parent.
func applyPatch(t *testing.T, doc map[string]any, patch []byte) map[string]any {
	t.Helper()
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	b, _ := json.Marshal(doc)
	var out map[string]any
	_ = json.Unmarshal(b, &out) // a copy
	for _, op := range ops {
		tokens := strings.Split(op.Path, "/")[1:]
		parent := any(out)
		for _, tok := range tokens[:len(tokens)-1] {
			parent = child(t, parent, unescape(tok), op.Path)
		}
		last := unescape(tokens[len(tokens)-1])
		m, ok := parent.(map[string]any)
		if !ok {
			t.Fatalf("%s: the parent is not an object", op.Path)
		}
		_, exists := m[last]
		switch op.Op {
		case "add":
		case "replace", "remove":
			if !exists {
				t.Fatalf("%s %s: no such member", op.Op, op.Path)
			}
		default:
			t.Fatalf("unexpected op %q", op.Op)
		}
		if op.Op == "remove" {
			delete(m, last)
			continue
		}
		var v any
		if err := json.Unmarshal(op.Value, &v); err != nil {
			t.Fatalf("%s: value %s: %v", op.Path, op.Value, err)
		}
		m[last] = v
	}
	return out
}

func child(t *testing.T, v any, tok, path string) any {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		c, ok := v[tok]
		if !ok {
			t.Fatalf("%s: no member %q", path, tok)
		}
		return c
	case []any:
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i >= len(v) {
			t.Fatalf("%s: no index %q", path, tok)
		}
		return v[i]
	}
	t.Fatalf("%s: %q is under a scalar", path, tok)
	return nil
}

func unescape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
}
