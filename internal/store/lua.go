package store

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"

	"github.com/mediocregopher/radix/v4"
)

// Each script is embedded into its own variable, so a missing file fails the
// build, and sent with the include files (lua/inc) it lists in front of it:
// a line "-- include: a, b" in its header names inc/a.lua and inc/b.lua, and
// an include lists the includes it needs the same way. newScript puts each
// needed include once in front of the script, those an include needs before
// it, in the order listed, and writes the protocol's constants (protocol.go)
// into the text as literals: Redis runs a script's whole text on every call,
// so a local per constant, or a helper the script does not use (a closure
// made on every call), would be a cost on the hot path (take) for nothing.
// The fenced scripts run as FCALL of a Functions library made of them
// (funcs.go), or as EVALSHA where the server has no Functions; radix sends
// EVALSHA and falls back to EVAL on NOSCRIPT, and routes by the KEYS it is
// given, which is what makes the scripts work on Redis Cluster.
//
// Every script follows one rule: it cannot fail after its first write,
// because Redis does not roll a script back. So each script first reads and
// checks everything (key types with need(), record formats, counter values),
// then writes with commands that cannot fail: types known, argument lists cut
// into CHUNK-sized calls (Lua's unpack stops near 8,000 values), and, at
// maxmemory, the first write one that frees memory (ZREM, HDEL, LPOP, LREM,
// DEL): Redis refuses a script only at its first write that may grow memory,
// before anything was written. lua_test.go checks every include a script
// lists exists and every helper it calls comes from one it lists.

//go:embed lua/inc/*.lua
var incFS embed.FS

// includes is every include file's text by name (inc/NAME.lua).
var includes = func() map[string]string {
	files, err := fs.Glob(incFS, "lua/inc/*.lua")
	if err != nil {
		panic(err)
	}
	out := make(map[string]string, len(files))
	for _, f := range files {
		b, err := incFS.ReadFile(f)
		if err != nil {
			panic(err)
		}
		out[strings.TrimSuffix(path.Base(f), ".lua")] = string(b)
	}
	return out
}()

// includeLine is a header line listing includes.
var includeLine = regexp.MustCompile(`(?m)^-- include: *(.*)$`)

// includeNames is the includes a script or include lists in its header (the
// comment lines it starts with).
func includeNames(src string) []string {
	var out []string
	for _, line := range strings.SplitAfter(src, "\n") {
		if !strings.HasPrefix(line, "--") {
			break
		}
		if m := includeLine.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			for _, n := range strings.Split(m[1], ",") {
				if n = strings.TrimSpace(n); n != "" {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// includeOrder is every include src needs, directly or through another,
// each once, an include after those it lists, in the order listed.
func includeOrder(src string) ([]string, error) {
	var order []string
	state := map[string]int{} // 1: being added, 2: added
	var add func(name, from string) error
	add = func(name, from string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("prioq: include %s lists itself through %s", name, from)
		case 2:
			return nil
		}
		text, ok := includes[name]
		if !ok {
			return fmt.Errorf("prioq: %s lists include %s: no lua/inc/%s.lua", from, name, name)
		}
		state[name] = 1
		for _, n := range includeNames(text) {
			if err := add(n, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, name)
		return nil
	}
	for _, n := range includeNames(src) {
		if err := add(n, "the script"); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// scriptText is src with its includes in front and the protocol's
// constants written in as literals.
func scriptText(src string) string {
	order, err := includeOrder(src)
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	for _, n := range order {
		b.WriteString(includes[n])
	}
	b.WriteString(src)
	return inlineConstants(b.String())
}

// constantLit is each constant's literal by name (protocol.go).
var constantLit = func() map[string]string {
	m := map[string]string{}
	for _, c := range luaConstantList() {
		m[c.name] = c.lit
	}
	return m
}()

// inlineConstants writes each constant named in the code of src (not in
// comments or strings, nor after a '.') as its literal.
func inlineConstants(src string) string {
	var b strings.Builder
	luaCode(src, func(code string, isCode bool) {
		if !isCode {
			b.WriteString(code)
			return
		}
		b.WriteString(luaName.ReplaceAllStringFunc(code, func(w string) string {
			if lit, ok := constantLit[strings.TrimPrefix(w, ".")]; ok && w[0] != '.' {
				return lit
			}
			return w
		}))
	})
	return b.String()
}

// luaName is a name in Lua code, with the '.' in front of a field's.
var luaName = regexp.MustCompile(`\.?\b[A-Za-z_][A-Za-z0-9_]*\b`)

// luaCode cuts src into runs of code and of comments and strings, in order
// (comments to the line's end; strings quoted with ' or ", with backslash
// escapes; the scripts use no long brackets).
func luaCode(src string, fn func(text string, isCode bool)) {
	start := 0
	for i := 0; i < len(src); i++ {
		end := i
		switch {
		case strings.HasPrefix(src[i:], "--"):
			end = strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src)
			} else {
				end += i
			}
		case src[i] == '\'' || src[i] == '"':
			end = i + 1
			for end < len(src) && src[end] != src[i] && src[end] != '\n' {
				if src[end] == '\\' {
					end++
				}
				end++
			}
			end++
			if end > len(src) {
				end = len(src)
			}
		default:
			continue
		}
		fn(src[start:i], true)
		fn(src[i:end], false)
		start, i = end, end-1
	}
	fn(src[start:], true)
}

// script is a fenced script (DESIGN.md §5): it may touch keys it does not
// declare (a group's list, a Range priority's list, a lane named in the
// filled index), so it must not run while its slot is being moved between
// cluster nodes, when such a key may still be on the other node (a read
// fails the script after its writes; a write creates a second copy on the
// importing node). shard.eval declares the shard's fence (keys.go) as its
// last key: a key of its slot that never exists, so a node that is
// migrating or importing the slot refuses the script with TRYAGAIN before it
// runs, and shard.do sends it again until the slot is stable or the
// deadline passes. fencePrelude takes the fence off KEYS again, so the
// script's own text never sees it. A script has no Cmd of its own: it runs
// through shard.eval, or not at all.
//
// sha is the text's SHA1, for an EVALSHA inside a pipeline (a take that
// carries acks: ridingCmd), where radix's EvalScript cannot go.
type script struct {
	es   radix.EvalScript
	name string // its function's, in the library (funcs.go)
	sha  string
}

// fencePrelude runs first in a fenced script: the fence is the last key.
const fencePrelude = "table.remove(KEYS) -- the fence (keys.go): declared, never touched\n"

// newFenced is newScript for a fenced script, named name in the library
// (funcs.go); growing: its first write may grow memory (see funcs.go).
func newFenced(name, src string, growing bool) script {
	fencedDefs = append(fencedDefs, fencedDef{name: name, src: src, growing: growing})
	text := fencePrelude + scriptText(src)
	sum := sha1.Sum([]byte(text))
	return script{es: radix.NewEvalScript(text), name: name, sha: hex.EncodeToString(sum[:])}
}

// The scripts that are not fenced declare every key they touch: open.lua,
// renew.lua the leases and the cancel marks, extend.lua, progress.lua (the
// leases and the one progress key), pause.lua and find.lua the one key they
// read or write (find.lua:
// one list or the in-flight hash and its leases; Shard.Find builds the names
// of the group and priority lists and passes each as KEYS), runnow.lua its
// four (radix follows a node's ASK for them, and a node that has the keys
// runs them); worker.lua the registry's keys; probe.lua declares none (it
// reads many queues of one node: internal/consume/multi.go handles a queue
// whose slot moves).

// newScript is src with its includes and constants (scriptText).
func newScript(src string) radix.EvalScript {
	return radix.NewEvalScript(scriptText(src))
}

var (
	//go:embed lua/open.lua
	openSrc    string
	openScript = newScript(openSrc)

	//go:embed lua/enqueue.lua
	enqueueSrc    string
	enqueueScript = newFenced("enqueue", enqueueSrc, true)

	//go:embed lua/grouped.lua
	groupedSrc    string
	groupedScript = newFenced("grouped", groupedSrc, true)

	//go:embed lua/promote.lua
	promoteSrc    string
	promoteScript = newFenced("promote", promoteSrc, false)

	//go:embed lua/cancel.lua
	cancelSrc    string
	cancelScript = newFenced("cancel", cancelSrc, false)

	//go:embed lua/depth.lua
	depthSrc    string
	depthScript = newFenced("depth", depthSrc, false)

	//go:embed lua/peek.lua
	peekSrc    string
	peekScript = newFenced("peek", peekSrc, false)

	//go:embed lua/purge.lua
	purgeSrc    string
	purgeScript = newFenced("purge", purgeSrc, false)

	//go:embed lua/take.lua
	takeSrc    string
	takeScript = newFenced("take", takeSrc, false)

	//go:embed lua/fail.lua
	failSrc    string
	failScript = newFenced("fail", failSrc, false)

	//go:embed lua/top.lua
	topSrc    string
	topScript = newFenced("top", topSrc, false)

	// probe.lua starts with its flags (a shebang line), so it gets no
	// prelude: it needs none.
	//go:embed lua/probe.lua
	probeSrc    string
	probeScript = radix.NewEvalScript(probeSrc)

	//go:embed lua/release.lua
	releaseSrc    string
	releaseScript = newFenced("release", releaseSrc, false)

	//go:embed lua/extend.lua
	extendSrc    string
	extendScript = newScript(extendSrc)

	//go:embed lua/renew.lua
	renewSrc    string
	renewScript = newScript(renewSrc)

	//go:embed lua/cancelrun.lua
	cancelRunSrc    string
	cancelRunScript = newFenced("cancelrun", cancelRunSrc, false)

	//go:embed lua/ack.lua
	ackSrc    string
	ackScript = newFenced("ack", ackSrc, false)

	//go:embed lua/finish.lua
	finishSrc    string
	finishScript = newFenced("finish", finishSrc, false)

	//go:embed lua/progress.lua
	progressSrc    string
	progressScript = newScript(progressSrc)

	//go:embed lua/unpark.lua
	unparkSrc    string
	unparkScript = newFenced("unpark", unparkSrc, false)

	//go:embed lua/groupinflight.lua
	groupInflightSrc    string
	groupInflightScript = newFenced("groupinflight", groupInflightSrc, false)

	//go:embed lua/grouplimit.lua
	groupLimitSrc    string
	groupLimitScript = newFenced("grouplimit", groupLimitSrc, false)

	//go:embed lua/sweep.lua
	sweepSrc    string
	sweepScript = newFenced("sweep", sweepSrc, false)

	//go:embed lua/pause.lua
	pauseSrc    string
	pauseScript = newScript(pauseSrc)

	//go:embed lua/dead.lua
	deadSrc    string
	deadScript = newFenced("dead", deadSrc, false)
)
