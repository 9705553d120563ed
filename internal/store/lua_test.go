package store

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

var (
	// luaDefines is a name a file defines at its top level: a helper or a
	// variable (an include's are what scripts may use of it).
	luaTopDef = regexp.MustCompile(`(?m)^local (?:function ([A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_, ]*?) =)`)
	// luaLocalDef is a name a file defines anywhere: a local, a loop
	// variable, a parameter.
	luaLocalDef = regexp.MustCompile(`local\s+function\s+([A-Za-z_][A-Za-z0-9_]*)|local\s+([A-Za-z_][A-Za-z0-9_,\s]*?)\s*=|for\s+([A-Za-z_][A-Za-z0-9_,\s]*?)\s+in\b|function\s*[A-Za-z0-9_]*\(([^)]*)\)`)
)

// includeDefs is, per include, the names it defines at its top level.
func includeDefs(t *testing.T) map[string]map[string]bool {
	defs := map[string]map[string]bool{}
	owner := map[string]string{}
	for name, src := range includes {
		defs[name] = map[string]bool{}
		for _, m := range luaTopDef.FindAllStringSubmatch(src, -1) {
			for _, n := range strings.Split(m[1]+m[2], ",") {
				n = strings.TrimSpace(n)
				if o, ok := owner[n]; ok {
					t.Errorf("%s is defined by include %s and by %s", n, o, name)
				}
				owner[n] = name
				defs[name][n] = true
			}
		}
	}
	return defs
}

// checkIncludes reports a file (a script, or the include self) that uses a
// name an include defines without listing that include itself (one it lists
// may drop what it lists), or that lists an include it uses nothing of.
func checkIncludes(defs map[string]map[string]bool, file, self, src string) error {
	if _, err := includeOrder(src); err != nil {
		return err
	}
	allowed := map[string]bool{self: true}
	for _, n := range includeNames(src) {
		allowed[n] = true
	}
	own := map[string]bool{}
	var code strings.Builder
	luaCode(src, func(text string, isCode bool) {
		if isCode {
			code.WriteString(text)
		} else {
			code.WriteString(" ")
		}
	})
	if self == "" {
		for _, m := range luaLocalDef.FindAllStringSubmatch(code.String(), -1) {
			for _, n := range strings.Split(m[1]+m[2]+m[3]+m[4], ",") {
				own[strings.TrimSpace(n)] = true
			}
		}
	}
	used := map[string]bool{}
	var errs []string
	for _, w := range luaName.FindAllString(code.String(), -1) {
		if w[0] == '.' || own[w] {
			continue
		}
		for inc, names := range defs {
			if !names[w] {
				continue
			}
			used[inc] = true
			if !allowed[inc] {
				errs = append(errs, fmt.Sprintf("%s uses %s of include %s, which it does not list", file, w, inc))
			}
		}
	}
	for _, n := range includeNames(src) {
		if !used[n] {
			errs = append(errs, fmt.Sprintf("%s lists include %s and uses nothing of it", file, n))
		}
	}
	sort.Strings(errs)
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(dedupe(errs), "\n"))
	}
	return nil
}

func dedupe(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// Every script lists the includes whose helpers it calls, each of them
// exists, each include lists those it needs, and every include serves some
// script: a missing include fails here, not in production.
func TestScriptsListTheirIncludes(t *testing.T) {
	defs := includeDefs(t)
	files, err := filepath.Glob("lua/*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	served := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.NoError(t, checkIncludes(defs, f, "", string(b)))
		order, err := includeOrder(string(b))
		require.NoError(t, err, f)
		for _, n := range order {
			served[n] = true
		}
	}
	for name, src := range includes {
		assert.NoError(t, checkIncludes(defs, "inc/"+name+".lua", name, src))
		assert.True(t, served[name], "include %s serves no script", name)
	}
	// A script that calls a helper of an include it does not list fails.
	assert.Error(t, checkIncludes(defs, "x.lua", "", "-- x.lua\n--\n-- include: util\nneed(KEYS[1], 'list')\nreturn kind_of(ARGV[1])"))
	assert.Error(t, checkIncludes(defs, "x.lua", "", "-- x.lua\n--\n-- include: util, lanes\nreturn need(KEYS[1], 'list')"), "listed, unused")
	assert.NoError(t, checkIncludes(defs, "x.lua", "", "-- x.lua\n--\n-- include: lanes\nlocal function need() end\nneed()\nreturn kind_of(ARGV[1])"), "its own local")
	_, err = includeOrder("-- x.lua\n-- include: nosuch\nreturn 1")
	assert.Error(t, err)
}

// Includes come once each, after those they list, in the order listed.
func TestIncludeOrder(t *testing.T) {
	order, err := includeOrder("-- x.lua\n-- include: park, util\nreturn 1")
	require.NoError(t, err)
	assert.Equal(t, []string{"lanes", "parkentry", "push", "records", "util", "park"}, order)
	order, err = includeOrder("-- x.lua: no includes\nreturn 1")
	require.NoError(t, err)
	assert.Equal(t, []string(nil), order)
	// Only the header counts.
	order, err = includeOrder("return 1\n-- include: util\n")
	require.NoError(t, err)
	assert.Equal(t, []string(nil), order)
}

// Constants are written into code as literals, and nowhere else.
func TestInlineConstants(t *testing.T) {
	assert.Equal(t, "if k == "+constantLit["KIND_RANGE"]+" then return 'KIND_RANGE' end -- KIND_RANGE\nreturn x.WAKE, "+constantLit["WAKE"],
		inlineConstants("if k == KIND_RANGE then return 'KIND_RANGE' end -- KIND_RANGE\nreturn x.WAKE, WAKE"))
	assert.Equal(t, `'\000'`, luaQuote("\x00"))
	assert.Equal(t, `'a\039\092'`, luaQuote(`a'\`))
}

// Every script compiles, with its includes and constants.
func TestScriptsLoad(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	files, err := filepath.Glob("lua/*.lua")
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := string(b)
		if !strings.HasPrefix(text, "#!") {
			text = fencePrelude + scriptText(text)
		}
		var sha string
		assert.NoError(t, c.Do(ctx, radix.Cmd(&sha, "SCRIPT", "LOAD", text)), f)
	}
}

// index_prio (inc/index.lua) names a list only for what prio_str writes.
func TestIndexPrioNamesOnlyCanonicalPriorities(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	es := radix.NewEvalScript(scriptText("-- include: index\nlocal p = index_prio(ARGV[1]); if p then return string.format('%d', p) end; return false"))
	for _, tc := range []struct {
		member string
		ok     bool
	}{
		{"0", true}, {"7", true}, {"-7", true}, {"9007199254740992", true}, {"-9007199254740992", true},
		{"9007199254740993", false}, {"", false}, {"x", false}, {"1e999", false}, {"-", false},
		{"007", false}, {"-0", false}, {"+7", false}, {"7.0", false}, {" 7", false},
		{"12345678901234567890", false}, {"0x10", false},
	} {
		var got radix.Maybe
		var s string
		got.Rcv = &s
		require.NoError(t, c.Do(ctx, es.Cmd(&got, nil, tc.member)))
		assert.Equal(t, tc.ok, !got.Null, "%q", tc.member)
		if tc.ok {
			assert.Equal(t, tc.member, s)
		}
	}
}
