package prioq

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prioq/prioq/internal/consume"
	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// The package's layout (STYLE.md "Layout", issue 30): the root is the public
// API over internal/consume (what a consumer runs) and internal/store (one
// shard's Redis). Paths go down the floors: these tests keep them so.

const (
	rootPkg    = "github.com/prioq/prioq"
	storePkg   = rootPkg + "/internal/store"
	consumePkg = rootPkg + "/internal/consume"
)

// goTool is the go command of the toolchain running the tests.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	_, err := os.Stat(p)
	require.NoError(t, err, "no go command to list the packages' imports")
	return p
}

// deps lists what the packages of dir (and their tests' helpers, not their
// tests) import, directly or not (go list -deps).
func deps(t *testing.T, dir string) []string {
	t.Helper()
	out, err := exec.Command(goTool(t), "list", "-deps", "-f", "{{.ImportPath}}", dir).CombinedOutput()
	require.NoError(t, err, "go list -deps %s: %s", dir, out)
	return strings.Fields(string(out))
}

// internal/store imports neither the root nor internal/consume, and
// internal/consume does not import the root: a path goes down, never back
// into a floor above it.
func TestImportRules(t *testing.T) {
	for _, tc := range []struct {
		dir, pkg  string
		forbidden []string
	}{
		{"./internal/store", storePkg, []string{rootPkg, consumePkg}},
		{"./internal/consume", consumePkg, []string{rootPkg}},
	} {
		_, err := os.Stat(tc.dir)
		require.NoError(t, err, "%s is where the layout puts it", tc.dir)
		got := deps(t, tc.dir+"/...")
		require.Contains(t, got, tc.pkg, "go list saw the package")
		for _, f := range tc.forbidden {
			assert.False(t, slices.Contains(got, f), "%s imports %s (directly or not)", tc.pkg, f)
		}
	}
	// And the store is below the root: the root imports it.
	assert.True(t, slices.Contains(deps(t, "."), storePkg), "the root imports %s", storePkg)
}

// radixSenders are the radix identifiers that make a Redis command or hold a
// connection to send one on: only internal/store uses them.
var radixSenders = []string{"Cmd", "FlatCmd", "CmdConfig", "NewPipeline", "Pipeline", "NewEvalScript", "EvalScript",
	"WithConn", "ScannerConfig"}

// Nothing above internal/store sends a Redis command: no file of the root
// (nor of internal/consume) refers to radix's command builders, pipelines,
// scripts, held connections or scanners, nor calls EncodeDecode, but
// Dialer's and LazyPools', which build what the client's connections and
// pools are (their PING checks a connection of Dialer's own making).
func TestNothingAboveTheStoreSendsARedisCommand(t *testing.T) {
	allowed := map[string]bool{"dialer.go": true, "lazypools.go": true}
	checked := 0
	for _, dir := range []string{".", "internal/consume"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || allowed[filepath.Base(f)] && dir == "." {
				continue
			}
			checked++
			for _, use := range redisSends(t, f) {
				t.Errorf("%s sends a Redis command itself (%s): that belongs to internal/store", f, use)
			}
		}
	}
	require.Greater(t, checked, 10, "the root's files were read")
	// The check sees what it looks for: dialer.go sends its PING.
	assert.NotEmpty(t, redisSends(t, "dialer.go"))
}

// redisSends lists where file refers to a radixSenders identifier or calls
// EncodeDecode, as "line: name".
func redisSends(t *testing.T, file string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	radixName := ""
	for _, imp := range f.Imports {
		if strings.Trim(imp.Path.Value, `"`) == "github.com/mediocregopher/radix/v4" {
			radixName = "radix"
			if imp.Name != nil {
				radixName = imp.Name.Name
			}
		}
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, isIdent := sel.X.(*ast.Ident)
		if sel.Sel.Name == "EncodeDecode" || isIdent && radixName != "" && x.Name == radixName && slices.Contains(radixSenders, sel.Sel.Name) {
			out = append(out, fset.Position(sel.Pos()).String()+": "+sel.Sel.Name)
		}
		return true
	})
	return out
}

// maxLines is how long a Go file may grow (STYLE.md: under ~450 lines).
const maxLines = 460

// Files stay short enough to be read whole: every non-test file of
// internal/store and internal/consume, and of the root but for the
// consumer's files the split of internal/consume breaks up (listed: each
// must shrink below the bound, and leave the list, once it is moved).
func TestFilesAreShort(t *testing.T) {
	consumeHalf := map[string]bool{}
	for _, dir := range []string{".", "internal/store", "internal/consume"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			n := strings.Count(string(b), "\n")
			if dir == "." && consumeHalf[filepath.Base(f)] {
				if n <= maxLines {
					t.Errorf("%s has %d lines: take it off the list of files still too long", f, n)
				}
				continue
			}
			assert.LessOrEqual(t, n, maxLines, "%s has %d lines", f, n)
		}
	}
}

// The public API states bounds and values that internal/store acts on: the
// root keeps them as literals (so that its documentation shows the number),
// and they must stay equal to the store's.
func TestRootConstantsMatchTheStore(t *testing.T) {
	for _, tc := range []struct {
		name       string
		root, want int64
	}{
		{"MaxBatch", MaxBatch, store.MaxBatch},
		{"MaxShards", MaxShards, store.MaxShards},
		{"MaxLevels", MaxLevels, store.MaxLevels},
		{"MaxRangePriority", MaxRangePriority, store.MaxRangePriority},
		{"MaxHeaders", MaxHeaders, store.MaxHeaders},
		{"MaxHeaderKey", MaxHeaderKey, store.MaxHeaderKey},
		{"MaxHeaderBytes", MaxHeaderBytes, store.MaxHeaderBytes},
		{"MaxRate", MaxRate, store.MaxRate},
		{"AtLeastOnce", int64(AtLeastOnce), int64(store.AtLeastOnce)},
		{"AtMostOnce", int64(AtMostOnce), int64(store.AtMostOnce)},
	} {
		assert.Equal(t, tc.want, tc.root, tc.name)
	}
	for _, m := range []Mode{AtLeastOnce, AtMostOnce, Mode(7)} {
		assert.Equal(t, store.Mode(m).String(), m.String(), "the meta key stores the store's spelling")
	}
	assert.Equal(t, store.StartByHeader, StartByHeader, "the header the takes read")
	assert.Equal(t, store.Levels(DefaultLevels), Layout{}.withDefaults().l)
	// internal/consume's loops default as the root's ConsumerConfig does.
	assert.Equal(t, time.Duration(DefaultSweepInterval), consume.DefaultSweepInterval)
	assert.Equal(t, time.Duration(DefaultPromoteWait), consume.DefaultPromoteWait)
	assert.Equal(t, time.Duration(DefaultRetryInterval), consume.DefaultRetryInterval)
	assert.Equal(t, time.Duration(DefaultBlockTimeout), consume.DefaultBlockTimeout)
	assert.Equal(t, time.Duration(DefaultProbeInterval), consume.DefaultProbeInterval)
}
