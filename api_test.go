package prioq

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The package's exported identifiers, with their types and signatures, are
// testdata/api.txt: a change of the public API shows up as a change of that
// file, which a reviewer sees (an apidiff of sorts, in the standard library
// only). Moving code between the package and internal/ must leave it as it
// is. PRIOQ_UPDATE_API=1 writes the file anew.
func TestPublicAPIIsWhatTestdataSays(t *testing.T) {
	got := publicAPI(t, ".")
	const file = "testdata/api.txt"
	if os.Getenv("PRIOQ_UPDATE_API") == "1" {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(file, []byte(got), 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err)
	if got != string(want) {
		wl, gl := lineSet(string(want)), lineSet(got)
		for l := range wl {
			assert.True(t, gl[l], "gone from the public API: %s", l)
		}
		for l := range gl {
			assert.True(t, wl[l], "new in the public API: %s", l)
		}
	}
}

func lineSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		out[l] = true
	}
	return out
}

// publicAPI lists, one per line and sorted, every exported constant,
// variable, type (with its exported fields or methods) and function of the
// package in dir, without comments.
func publicAPI(t *testing.T, dir string) string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var lines []string
	print := func(n any) string {
		var b bytes.Buffer
		require.NoError(t, (&printer.Config{Mode: printer.RawFormat}).Fprint(&b, fset, n))
		return strings.Join(strings.Fields(b.String()), " ")
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		if file.Name.Name != "prioq" {
			continue
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				recv := ""
				if d.Recv != nil && len(d.Recv.List) > 0 {
					rt := d.Recv.List[0].Type
					if star, ok := rt.(*ast.StarExpr); ok {
						rt = star.X
					}
					if id, ok := rt.(*ast.Ident); !ok || !id.IsExported() {
						continue
					}
					recv = "(" + print(d.Recv.List[0].Type) + ") "
				}
				lines = append(lines, "func "+recv+d.Name.Name+strings.TrimPrefix(print(d.Type), "func"))
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for i, n := range s.Names {
							if !n.IsExported() {
								continue
							}
							l := d.Tok.String() + " " + n.Name
							if s.Type != nil {
								l += " " + print(s.Type)
							}
							if d.Tok == token.CONST && i < len(s.Values) {
								l += " = " + print(s.Values[i])
							}
							lines = append(lines, l)
						}
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						lines = append(lines, typeLines(s, print)...)
					}
				}
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// typeLines is a type's line, and one per exported field or interface
// method (unexported ones are the package's business).
func typeLines(s *ast.TypeSpec, print func(any) string) []string {
	name := "type " + s.Name.Name
	if s.Assign.IsValid() {
		return []string{name + " = " + print(s.Type)}
	}
	switch tt := s.Type.(type) {
	case *ast.StructType:
		out := []string{name + " struct"}
		for _, f := range tt.Fields.List {
			if len(f.Names) == 0 { // embedded
				if n := print(f.Type); ast.IsExported(strings.TrimPrefix(n, "*")) {
					out = append(out, name+" embeds "+n)
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					out = append(out, name+"."+n.Name+" "+print(f.Type))
				}
			}
		}
		return out
	case *ast.InterfaceType:
		out := []string{name + " interface"}
		for _, m := range tt.Methods.List {
			for _, n := range m.Names {
				out = append(out, name+"."+n.Name+strings.TrimPrefix(print(m.Type), "func"))
			}
			if len(m.Names) == 0 {
				out = append(out, name+" embeds "+print(m.Type))
			}
		}
		return out
	}
	return []string{name + " " + print(s.Type)}
}
