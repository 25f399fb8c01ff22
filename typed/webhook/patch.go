package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// jsonPatch returns the JSON patch that turns the JSON document before into after, nil
// when they are equal. Objects are compared member by member, so that the patch touches
// only what changed; an array or a value that changed is replaced whole.
func jsonPatch(before, after []byte) ([]byte, error) {
	var b, a any
	if err := decodeJSON(before, &b); err != nil {
		return nil, err
	}
	if err := decodeJSON(after, &a); err != nil {
		return nil, err
	}
	var ops []patchOp
	if err := diff("", b, a, &ops); err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

func decodeJSON(data []byte, v *any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber() // numbers compared and written as they are, 64-bit integers included
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("decoding JSON to compare: %w", err)
	}
	return nil
}

// diff appends to ops the operations that turn b into a at path.
func diff(path string, b, a any, ops *[]patchOp) error {
	bm, bok := b.(map[string]any)
	am, aok := a.(map[string]any)
	if !bok || !aok {
		if reflect.DeepEqual(b, a) {
			return nil
		}
		return add(ops, "replace", path, a)
	}
	for _, k := range slices.Sorted(maps.Keys(bm)) {
		if _, ok := am[k]; !ok {
			*ops = append(*ops, patchOp{Op: "remove", Path: path + "/" + escape(k)})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(am)) {
		p := path + "/" + escape(k)
		bv, ok := bm[k]
		if !ok {
			if err := add(ops, "add", p, am[k]); err != nil {
				return err
			}
			continue
		}
		if err := diff(p, bv, am[k], ops); err != nil {
			return err
		}
	}
	return nil
}

func add(ops *[]patchOp, op, path string, v any) error {
	value, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding a patch's value: %w", err)
	}
	*ops = append(*ops, patchOp{Op: op, Path: path, Value: value})
	return nil
}

// escape escapes a member name as a JSON pointer's reference token (RFC 6901).
func escape(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}
