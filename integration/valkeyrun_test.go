package integration

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// scripts/test runs the integration tests that start a local cluster on
// Valkey too, by a -run pattern: every test that starts one (newTestCluster,
// startCluster, loadedCluster) must match it, or it would silently run on
// Redis alone.
func TestValkeyRunCoversEveryClusterTest(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "scripts", "test"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^cluster='([^']+)'`).FindSubmatch(script)
	require.NotNil(t, m, "scripts/test sets cluster='...'")
	pattern := regexp.MustCompile(string(m[1]))

	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	starts := map[string]bool{"newTestCluster": true, "startCluster": true, "loadedCluster": true}
	var tests []string
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			uses := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if id, ok := call.Fun.(*ast.Ident); ok && starts[id.Name] {
						uses = true
					}
				}
				return !uses
			})
			if uses {
				tests = append(tests, fn.Name.Name)
				require.True(t, pattern.MatchString(fn.Name.Name), "%s starts a local cluster but scripts/test's pattern %q does not run it on Valkey", fn.Name.Name, pattern)
			}
		}
	}
	require.NotEmpty(t, tests)
	t.Logf("%d cluster tests run on Valkey too: %v", len(tests), tests)
}
