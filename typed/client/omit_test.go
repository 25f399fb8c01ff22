package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// omitted is what the omitter passes on of in, read through r's wrapping.
func omitted(t testing.TB, in string, path []string, wrap func(io.Reader) io.Reader) string {
	t.Helper()
	out, err := io.ReadAll(newOmitter(wrap(strings.NewReader(in)), path))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

var readers = map[string]func(io.Reader) io.Reader{
	"whole":       func(r io.Reader) io.Reader { return r },
	"byte a read": iotest.OneByteReader,
	"half reads":  iotest.HalfReader,
}

// The managedFields of each watch event's object, and of each listed item, become null,
// whatever their value and place among the other keys; everything else, including
// managedFields anywhere else (a template's metadata, a spec's field of that name), a
// string that only spells the key, and keys written with escapes, is passed on byte for
// byte, through reads of any size.
func TestOmitterReplacesOnlyTheObjectsManagedFields(t *testing.T) {
	for _, c := range []struct {
		name     string
		path     []string
		in, want string
	}{
		{"watch events", watchManagedFields,
			`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"a","managedFields":[{"manager":"m","fieldsV1":{"f:spec":{".":{}}}}]},"spec":{}}}` + "\n" +
				`{"type":"MODIFIED","object":{"metadata":{"managedFields":[],"name":"b"}}}` + "\n",
			`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"a","managedFields":null},"spec":{}}}` + "\n" +
				`{"type":"MODIFIED","object":{"metadata":{"managedFields":null,"name":"b"}}}` + "\n"},
		{"scalars and strings", watchManagedFields,
			`{"object":{"metadata":{"managedFields":null}}} {"object":{"metadata":{"managedFields" : 12 ,"a":1}}} {"object":{"metadata":{"managedFields":"x\"}]"}}}`,
			`{"object":{"metadata":{"managedFields":null}}} {"object":{"metadata":{"managedFields" :null ,"a":1}}} {"object":{"metadata":{"managedFields":null}}}`},
		{"whitespace", watchManagedFields,
			"{ \"object\" : { \"metadata\" : { \"managedFields\" :\n [ { \"a\" : \"]\" } ] \n, \"name\" : \"a\" } } }",
			"{ \"object\" : { \"metadata\" : { \"managedFields\" :null \n, \"name\" : \"a\" } } }"},
		{"elsewhere", watchManagedFields,
			`{"object":{"spec":{"template":{"metadata":{"managedFields":[1]}},"managedFields":[2]},"managedFields":[3],"metadata":{"labels":{"managedFields":"4"},"annotations":{"x":"\"managedFields\":[5]"}}},"metadata":{"managedFields":[6]},"managedFields":[7]}`,
			`{"object":{"spec":{"template":{"metadata":{"managedFields":[1]}},"managedFields":[2]},"managedFields":[3],"metadata":{"labels":{"managedFields":"4"},"annotations":{"x":"\"managedFields\":[5]"}}},"metadata":{"managedFields":[6]},"managedFields":[7]}`},
		{"escaped keys", watchManagedFields,
			`{"object":{"metadata":{"managedField\u0073":[1]}}} {"obj\u0065ct":{"metadata":{"managedFields":[2]}}}`,
			`{"object":{"metadata":{"managedField\u0073":[1]}}} {"obj\u0065ct":{"metadata":{"managedFields":[2]}}}`},
		{"a list", listManagedFields,
			`{"kind":"WList","metadata":{"resourceVersion":"5","managedFields":[0]},"items":[{"metadata":{"name":"a","managedFields":[{"m":"["}]}},{"metadata":{"name":"b"}},{"metadata":{"managedFields":[1]}}]}`,
			`{"kind":"WList","metadata":{"resourceVersion":"5","managedFields":[0]},"items":[{"metadata":{"name":"a","managedFields":null}},{"metadata":{"name":"b"}},{"metadata":{"managedFields":null}}]}`},
		{"a missing value stays a syntax error", watchManagedFields,
			`{"object":{"metadata":{"managedFields":}}} {"object":{"metadata":{"managedFields": ,"a":1}}}`,
			`{"object":{"metadata":{"managedFields":}}} {"object":{"metadata":{"managedFields":,"a":1}}}`},
		{"items that are not in an array", listManagedFields,
			`{"items":{"*":{"metadata":{"managedFields":[1]}}}}`,
			`{"items":{"*":{"metadata":{"managedFields":[1]}}}}`},
	} {
		for rname, wrap := range readers {
			t.Run(c.name+"/"+rname, func(t *testing.T) {
				if got := omitted(t, c.in, c.path, wrap); got != c.want {
					t.Errorf("got\n%s\nwant\n%s", got, c.want)
				}
			})
		}
	}
}

// dataThenError returns data together with err, then io.EOF: a connection that breaks
// just after its last bytes came.
type dataThenError struct {
	data []byte
	err  error
	done bool
}

func (r *dataThenError) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	r.done = true
	return copy(p, r.data), r.err
}

// An error that a read returns together with the last bytes reaches the decoder after
// those bytes, as from the reader itself: a broken stream is never taken for its end.
func TestOmitterPassesOnAnErrorThatCameWithData(t *testing.T) {
	broken := errors.New("connection reset")
	in := `{"type":"ADDED","object":{"metadata":{"managedFields":[1]}}}`
	got, err := io.ReadAll(newOmitter(&dataThenError{data: []byte(in), err: broken}, watchManagedFields))
	if !errors.Is(err, broken) || string(got) != `{"type":"ADDED","object":{"metadata":{"managedFields":null}}}` {
		t.Errorf("read %q, %v; want the filtered event, then %v", got, err, broken)
	}
}

// stripped decodes a stream of JSON values and sets each one's value at path, where it
// has one, to nil: what the omitter's output must decode to. ok is false when in is not
// a stream of JSON values.
func stripped(in []byte, path []string) (out []any, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	for {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			return out, true
		} else if err != nil {
			return nil, false
		}
		strip(v, path)
		out = append(out, v)
	}
}

func strip(v any, path []string) {
	if len(path) == 0 {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		if len(path) == 1 {
			if _, ok := x[path[0]]; ok {
				x[path[0]] = nil
			}
		} else if path[0] != "*" {
			if next, ok := x[path[0]]; ok {
				strip(next, path[1:])
			}
		}
	case []any:
		if path[0] == "*" && len(path) > 1 {
			for _, e := range x {
				strip(e, path[1:])
			}
		}
	}
}

// For any input that is a stream of JSON values, the omitter's output is one too, and
// decodes to the same values with the objects' managedFields null; for any other input
// it ends, without a panic.
func FuzzOmitter(f *testing.F) {
	f.Add([]byte(`{"type":"ADDED","object":{"metadata":{"name":"a","managedFields":[{"manager":"m"}]}}}`), false)
	f.Add([]byte(`{"items":[{"metadata":{"managedFields":[{"a":"}"}],"name":"a"}},{"metadata":{"managedFields":7}}]}`), true)
	f.Add([]byte(`{"object":{"metadata":{"managedFields" : "x\\\"" , "b":[true,null]}}} {"object":{}}`), false)
	f.Fuzz(func(t *testing.T, in []byte, list bool) {
		path := watchManagedFields
		if list {
			path = listManagedFields
		}
		for _, wrap := range readers {
			got, err := io.ReadAll(newOmitter(wrap(bytes.NewReader(in)), path))
			if err != nil {
				t.Fatal(err)
			}
			want, ok := stripped(in, path)
			if !ok {
				continue
			}
			var none []string
			have, ok := stripped(got, none)
			if !ok {
				t.Fatalf("%q became %q, not JSON", in, got)
			}
			if diff := cmp.Diff(want, have); diff != "" {
				t.Fatalf("%q became %q (-want +got):\n%s", in, got, diff)
			}
		}
	})
}

// BenchmarkOmitter is what the omitter costs per byte of a watch stream of custom
// resources, each with a managedFields entry as the server writes one.
func BenchmarkOmitter(b *testing.B) {
	const event = `{"type":"MODIFIED","object":{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"annotations":{"example.com/created-by":"bench"},"creationTimestamp":"2026-11-28T08:07:00Z","generation":3,"labels":{"app.kubernetes.io/name":"widget","shard":"%d"},"managedFields":[{"apiVersion":"example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/name":{},"f:shard":{}}},"f:spec":{".":{},"f:image":{},"f:ports":{},"f:replicas":{},"f:tags":{}}},"manager":"bench","operation":"Update","time":"2026-11-28T08:07:00Z"}],"name":"widget-%05d","namespace":"widgets","resourceVersion":"%d","uid":"0b6a3e2c-1f7d-4f8e-9a51-%012d"},"spec":{"image":"registry.example.com/team/widget:v1.2.3","ports":[{"name":"http","port":8080,"protocol":"TCP"}],"replicas":%d,"tags":["blue","green"]}}}` + "\n"
	var in bytes.Buffer
	for i := range 1000 {
		fmt.Fprintf(&in, event, i%16, i, 1000+i, i, i%5)
	}
	b.SetBytes(int64(in.Len()))
	buf := make([]byte, 32<<10)
	for b.Loop() {
		o := newOmitter(bytes.NewReader(in.Bytes()), watchManagedFields)
		for {
			if _, err := o.Read(buf); err == io.EOF {
				break
			}
		}
	}
}
