package main_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// The main is at most 15 lines of code (comments, imports and blank lines aside), and
// the README's quick start shows it as it is: this file compiles, so the README's copy
// does.
func TestTheMainIsADozenLinesAndTheREADMEShowsIt(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "main.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	skip := map[int]bool{}
	mark := func(from, to token.Pos) {
		for l := fset.Position(from).Line; l <= fset.Position(to).Line; l++ {
			skip[l] = true
		}
	}
	for _, c := range file.Comments {
		mark(c.Pos(), c.End())
	}
	var main *ast.FuncDecl
	for _, d := range file.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			mark(g.Pos(), g.End())
		}
		if f, ok := d.(*ast.FuncDecl); ok && f.Name.Name == "main" {
			main = f
		}
	}
	code := 0
	for i, line := range strings.Split(string(src), "\n") {
		if !skip[i+1] && strings.TrimSpace(line) != "" {
			code++
		}
	}
	if code > 15 {
		t.Errorf("main.go has %d lines of code, want at most 15", code)
	}
	readme, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src[fset.Position(main.Pos()).Offset:fset.Position(main.End()).Offset])
	if !strings.Contains(string(readme), body) {
		t.Errorf("README.md does not show main.go's main as it is:\n%s", body)
	}
}
