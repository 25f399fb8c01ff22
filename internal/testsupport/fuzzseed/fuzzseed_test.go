package fuzzseed_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/typedinformer/typedinformer/internal/testsupport/fuzzseed"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []any
		wantErr bool
	}{
		{name: "strings", in: "go test fuzz v1\nstring(\"ns\")\nstring(\"a/b\")\n", want: []any{"ns", "a/b"}},
		{name: "bytes with escapes", in: "go test fuzz v1\n[]byte(\"\\x00\\x01\\xff\")\n", want: []any{[]byte{0, 1, 255}}},
		{name: "bool and bytes", in: "go test fuzz v1\nbool(false)\n[]byte(\"\")\n", want: []any{false, []byte{}}},
		{name: "backquoted string", in: "go test fuzz v1\nstring(`x\\y`)\n", want: []any{`x\y`}},
		{name: "missing header", in: "string(\"ns\")\n", wantErr: true},
		{name: "unsupported type", in: "go test fuzz v1\nint(3)\n", wantErr: true},
		{name: "not a conversion", in: "go test fuzz v1\n\"ns\"\n", wantErr: true},
		{name: "bool that is not a constant", in: "go test fuzz v1\nbool(yes)\n", wantErr: true},
		{name: "array of another element", in: "go test fuzz v1\n[]rune(\"x\")\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fuzzseed.Parse(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse: err = %v, want an error: %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func ExampleParse() {
	values, err := fuzzseed.Parse("go test fuzz v1\nbool(true)\n[]byte(\"\\x01\\x02\")\n")
	fmt.Println(values, err)
	// Output: [true [1 2]] <nil>
}
