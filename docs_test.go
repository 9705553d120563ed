package prioq

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The docs as STYLE.md lays them out: a README of at most 250 lines whose
// 30-second example is Example (which runs with the tests), pages under
// docs/, and CONTRIBUTING.md. These tests read files only; they catch a link
// left behind when a file or a heading moves.

// docFiles are the Markdown files whose links are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md")
	}
	return append([]string{"README.md", "CONTRIBUTING.md"}, pages...)
}

var (
	fenceRe  = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[ \t]*$")
	codeRe   = regexp.MustCompile("`[^`\n]*`")
	linkRe   = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headRe   = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	schemeRe = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose is a Markdown text without its code blocks and code spans, where
// brackets are code, not links.
func prose(md string) string {
	return codeRe.ReplaceAllString(fenceRe.ReplaceAllString(md, ""), "")
}

// anchors returns the anchors GitHub gives a file's headings: lower case,
// punctuation and symbols dropped, spaces made hyphens, a repeated one
// numbered (-1, -2, ...).
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headRe.FindAllStringSubmatch(fenceRe.ReplaceAllString(md, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestDocsAnchors(t *testing.T) {
	tests := []struct {
		name, heading, want string
	}{
		{"plain", "## Pool size", "pool-size"},
		{"code and colon", "## Many queues: `MultiConsumer`", "many-queues-multiconsumer"},
		{"commas", "## 10, 100, 1,000 primaries, on paper", "10-100-1000-primaries-on-paper"},
		{"quotes", `## What "acknowledged" means`, "what-acknowledged-means"},
		{"repeated", "## Measured\n\n## Measured", "measured-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a := anchors(tt.heading); !a[tt.want] {
				t.Errorf("anchors(%q) = %v, want %q among them", tt.heading, a, tt.want)
			}
		})
	}
}

// Every relative link in the README, CONTRIBUTING.md and docs/*.md names a
// file or folder of the repository that exists, and an anchor names a
// heading of its page.
func TestDocsLinksResolve(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	cache := map[string]map[string]bool{}
	for _, file := range docFiles(t) {
		t.Run(file, func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			links := linkRe.FindAllStringSubmatch(prose(string(src)), -1)
			for _, l := range links {
				target := l[1]
				if schemeRe.MatchString(target) {
					continue // http(s), mailto: not checked here
				}
				path, anchor, _ := strings.Cut(target, "#")
				full := file
				if path != "" {
					full = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				}
				abs, err := filepath.Abs(full)
				if err != nil || !strings.HasPrefix(abs, root) {
					t.Errorf("%s: link %q leaves the repository", file, target)
					continue
				}
				if _, err := os.Stat(full); err != nil {
					t.Errorf("%s: link %q: no such file or folder (%s)", file, target, full)
					continue
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(full, ".md") {
					t.Errorf("%s: link %q: an anchor in a file that is not Markdown", file, target)
					continue
				}
				a, ok := cache[full]
				if !ok {
					md, err := os.ReadFile(full)
					if err != nil {
						t.Fatal(err)
					}
					a = anchors(string(md))
					cache[full] = a
				}
				if !a[anchor] {
					t.Errorf("%s: link %q: %s has no heading with anchor #%s", file, target, full, anchor)
				}
			}
		})
	}
}

// The README stays a front page: at most 250 lines.
func TestDocsREADMEIsShort(t *testing.T) {
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > 250 {
		t.Errorf("README.md has %d lines; keep it at most 250 and move the rest to a page under docs/", n)
	}
}

// The README's 30-second example is a whole program: it parses, it imports
// exactly the packages it uses, and its main is Example (example_test.go,
// which compiles and runs with the tests) but for the address, the queue's
// name and the example's clean-up.
func TestDocsREADMEExampleIsExample(t *testing.T) {
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), "```go\n")
	if !ok {
		t.Fatal("README.md has no ```go block")
	}
	code, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md's first ```go block does not end")
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "README.md", code, parser.ParseComments)
	if err != nil {
		t.Fatalf("the README's example does not parse: %v", err)
	}
	if f.Name.Name != "main" {
		t.Errorf("the README's example is package %s, want main", f.Name.Name)
	}

	// Imports: the names the program qualifies with (idents the parser could
	// not resolve to a local) are the packages it imports, no more, no less.
	var imported, used []string
	for _, imp := range f.Imports {
		p := strings.Trim(imp.Path.Value, `"`)
		parts := strings.Split(p, "/")
		name := parts[len(parts)-1]
		if regexp.MustCompile(`^v[0-9]+$`).MatchString(name) && len(parts) > 1 {
			name = parts[len(parts)-2]
		}
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imported = append(imported, name)
	}
	var mainFn *ast.FuncDecl
	ast.Inspect(f, func(n ast.Node) bool {
		if fd, ok := n.(*ast.FuncDecl); ok && fd.Name.Name == "main" {
			mainFn = fd
		}
		if se, ok := n.(*ast.SelectorExpr); ok {
			//lint:ignore SA1019 object resolution is what tells a package name from a local here
			if id, ok := se.X.(*ast.Ident); ok && id.Obj == nil && !slices.Contains(used, id.Name) {
				used = append(used, id.Name)
			}
		}
		return true
	})
	slices.Sort(imported)
	slices.Sort(used)
	if !slices.Equal(imported, used) {
		t.Errorf("the README's example imports %v but uses %v", imported, used)
	}
	if mainFn == nil {
		t.Fatal("the README's example has no func main")
	}
	readme := bodyLines(code, fset, mainFn.Body)

	exSrc, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	efset := token.NewFileSet()
	ef, err := parser.ParseFile(efset, "example_test.go", exSrc, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var ex []string
	for _, d := range ef.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "Example" {
			ex = bodyLines(string(exSrc), efset, fd.Body)
		}
	}
	if ex == nil {
		t.Fatal("example_test.go has no func Example")
	}
	var want []string
	for _, l := range ex {
		if l == "// Output:" {
			break
		}
		if l == "defer q.Purge(ctx)" {
			continue // the example's clean-up
		}
		l = strings.ReplaceAll(l, "redisAddr()", `"127.0.0.1:6379"`)
		l = strings.ReplaceAll(l, `"example-emails"`, `"emails"`)
		want = append(want, l)
	}
	if !slices.Equal(readme, want) {
		t.Errorf("the README's main is not Example's body:\nREADME:\n\t%s\nExample:\n\t%s",
			strings.Join(readme, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// bodyLines returns the lines of a function body, trimmed, blank ones dropped.
func bodyLines(src string, fset *token.FileSet, body *ast.BlockStmt) []string {
	from, to := fset.Position(body.Lbrace).Offset+1, fset.Position(body.Rbrace).Offset
	var out []string
	for _, l := range strings.Split(src[from:to], "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return out
}
