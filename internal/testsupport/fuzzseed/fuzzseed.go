// Package fuzzseed loads the seed corpora of the project's fuzz targets from the
// repository's top-level testdata/fuzz folder, so that every target's seeds live in one
// place as files rather than as f.Add calls scattered through the tests.
//
// Each seed is one file in the format `go test -fuzz` itself writes for a failing input
// (a "go test fuzz v1" header, then one Go literal per line, such as string("ns"),
// []byte("\x01\x02") or bool(true)), so an input that the fuzzer finds can be copied from
// the package's testdata/fuzz/FuzzX folder into the shared corpus as it is.
package fuzzseed

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const header = "go test fuzz v1"

// Add adds every seed in testdata/fuzz/<target> at the repository's top level to f. It
// fails f when the folder holds no seed, or when a seed cannot be read, so that a missing
// corpus is never mistaken for a passing run.
func Add(f *testing.F, target string) {
	f.Helper()
	top, err := root()
	if err != nil {
		f.Fatal(err)
	}
	dir := filepath.Join(top, "testdata", "fuzz", target)
	names, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		f.Fatal(err)
	}
	if len(names) == 0 {
		f.Fatalf("no seed corpus in %s", dir)
	}
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		values, err := Parse(string(b))
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		f.Add(values...)
	}
}

// Parse decodes one seed file's contents into the values it lists, in order. It accepts
// the literals the project's fuzz targets take: string, []byte and bool.
func Parse(s string) ([]any, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if strings.TrimSpace(lines[0]) != header {
		return nil, fmt.Errorf("the first line is %q, want %q", lines[0], header)
	}
	var values []any
	for i, line := range lines[1:] {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		v, err := literal(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+2, err)
		}
		values = append(values, v)
	}
	return values, nil
}

func literal(line string) (any, error) {
	expr, err := parser.ParseExpr(line)
	if err != nil {
		return nil, err
	}
	call, ok := expr.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return nil, fmt.Errorf("%q is not a conversion such as string(\"x\")", line)
	}
	var typ string
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		typ = fun.Name
	case *ast.ArrayType:
		if elt, ok := fun.Elt.(*ast.Ident); ok && fun.Len == nil && elt.Name == "byte" {
			typ = "[]byte"
		}
	}
	switch arg := call.Args[0].(type) {
	case *ast.BasicLit:
		if arg.Kind != token.STRING {
			break
		}
		s, err := strconv.Unquote(arg.Value)
		if err != nil {
			return nil, err
		}
		switch typ {
		case "string":
			return s, nil
		case "[]byte":
			return []byte(s), nil
		}
	case *ast.Ident:
		if typ == "bool" && (arg.Name == "true" || arg.Name == "false") {
			return arg.Name == "true", nil
		}
	}
	return nil, fmt.Errorf("%q: only string, []byte and bool literals are supported", line)
}

// root returns the repository's top level: the nearest folder above the test's working
// directory (its package's folder) that holds go.mod.
func root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
