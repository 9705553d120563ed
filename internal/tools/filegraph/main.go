// Command filegraph measures how the files of a Go package depend on each
// other: file A references file B when an identifier in A resolves (go/types)
// to a declaration in B: a function, a method, a type, a field, a variable
// or a constant of the package. It prints, per package, the files and their
// lines, the edges, and the strongly connected components of the graph (a
// set of files that all reach each other: none of them can be read, or
// changed, without the others). Test files are left out.
//
//	go run ./internal/tools/filegraph [-edges] . ./internal/store
//
// It is the measurement issue 30 asks for (before and after the split of the
// root package); it serves no other purpose and is not part of the library.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	showEdges := flag.Bool("edges", false, "print every edge")
	flag.Parse()
	for _, dir := range flag.Args() {
		if err := measure(dir, *showEdges); err != nil {
			fmt.Fprintln(os.Stderr, "filegraph:", err)
			os.Exit(1)
		}
	}
}

func measure(dir string, showEdges bool) error {
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return err
	}
	var files []*ast.File
	lines := map[string]int{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		lines[filepath.Base(p)] = fset.File(f.Pos()).LineCount()
	}
	if len(files) == 0 {
		return fmt.Errorf("%s: no Go files", dir)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil), Error: func(error) {}}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, _ := conf.Check(dir, fset, files, info)
	fileOf := func(pos token.Pos) string { return filepath.Base(fset.Position(pos).Filename) }
	edges := map[[2]string]int{}
	add := func(from token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return
		}
		// Only what a package declares at its top level or on its types:
		// locals live in the file that uses them anyway.
		a, b := fileOf(from), fileOf(obj.Pos())
		if a != b {
			edges[[2]string{a, b}]++
		}
	}
	for id, obj := range info.Uses {
		add(id.Pos(), obj)
	}
	for sel, s := range info.Selections {
		add(sel.Sel.Pos(), s.Obj())
	}
	var names []string
	total := 0
	for n, l := range lines {
		names = append(names, n)
		total += l
	}
	sort.Strings(names)
	fmt.Printf("package %s (%s): %d files, %d lines\n", pkg.Name(), dir, len(names), total)
	bySize := append([]string(nil), names...)
	sort.Slice(bySize, func(i, j int) bool { return lines[bySize[i]] > lines[bySize[j]] })
	for _, n := range bySize[:min(5, len(bySize))] {
		fmt.Printf("  largest: %-16s %5d lines\n", n, lines[n])
	}
	out := map[string][]string{}
	for e := range edges {
		out[e[0]] = append(out[e[0]], e[1])
	}
	fmt.Printf("  edges: %d\n", len(edges))
	if showEdges {
		var es []string
		for e, n := range edges {
			es = append(es, fmt.Sprintf("    %s -> %s (%d)", e[0], e[1], n))
		}
		sort.Strings(es)
		fmt.Println(strings.Join(es, "\n"))
	}
	sccs := tarjan(names, out)
	sort.Slice(sccs, func(i, j int) bool { return len(sccs[i]) > len(sccs[j]) })
	var sizes []string
	for _, c := range sccs {
		if len(c) > 1 {
			sort.Strings(c)
			sizes = append(sizes, fmt.Sprint(len(c)))
		}
	}
	fmt.Printf("  strongly connected components of more than one file: %d (sizes %s)\n", len(sizes), strings.Join(sizes, ", "))
	for _, c := range sccs {
		if len(c) > 1 {
			fmt.Printf("    {%s}\n", strings.Join(c, " "))
		}
	}
	return nil
}

// tarjan returns the strongly connected components of the graph.
func tarjan(nodes []string, out map[string][]string) [][]string {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var sccs [][]string
	next := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range out[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var c []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				c = append(c, w)
				if w == v {
					break
				}
			}
			sccs = append(sccs, c)
		}
	}
	for _, v := range nodes {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return sccs
}
