package store

import (
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// libFor keeps of lib.lua what a script names in its code, and what those
// helpers name in turn, in lib.lua's order; names in comments do not count.
func TestLibFor(t *testing.T) {
	helpers := func(lib string) []string {
		var out []string
		for _, m := range luaFunc.FindAllStringSubmatch(lib, -1) {
			out = append(out, m[1])
		}
		return out
	}
	preamble := libSrc[:strings.Index(libSrc, "local function ")]
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"none", "return 1", nil},
		{"only in a comment", "-- need(key, 'list') would check it\nreturn 1", nil},
		{"direct", "need(KEYS[1], 'list')", []string{"need"}},
		{"transitive", "local lane = routed(ARGV[1], 3, 1)", []string{"routing_end", "routed"}},
		{"deep", "unschedule(KEYS[1], ARGV[1], ARGV[2])",
			[]string{"chunked", "routing_end", "delayed_id", "unschedule"}},
		{"a prefix is not a name", "local need_it = 1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := libFor(tc.src)
			require.True(t, strings.HasPrefix(got, preamble), "the constants and comments before the first helper stay")
			assert.Equal(t, tc.want, helpers(got))
		})
	}
	// Every helper lib.lua defines is kept when a script names them all.
	var all []string
	for _, name := range helpers(libSrc) {
		all = append(all, name+"()")
	}
	assert.Equal(t, helpers(libSrc), helpers(libFor(strings.Join(all, "\n"))))
}

// index_prio (lib.lua) names a list only for what prio_str writes.
func TestIndexPrioNamesOnlyCanonicalPriorities(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	src := libFor("return index_prio(ARGV[1])") + "local p = index_prio(ARGV[1]); if p then return string.format('%d', p) end; return false"
	es := radix.NewEvalScript(constants + src)
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
