package store

import (
	_ "embed"
	"regexp"
	"strings"

	"github.com/mediocregopher/radix/v4"
)

// Each script is embedded into its own variable, so a missing file fails the
// build, and sent with the protocol's constants (protocol.go) and lua/lib.lua
// (shared helpers) in front of it. radix sends EVALSHA and falls back to EVAL on NOSCRIPT, and routes by
// the KEYS it is given, which is what makes the scripts work on Redis Cluster.
//
// Every script follows one rule (see lib.lua): it cannot fail after its first
// write, because Redis does not roll a script back.

//go:embed lua/lib.lua
var libSrc string

// constants is the protocol's part of every script's prelude, written once.
var constants = luaConstants()

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
type script struct{ es radix.EvalScript }

// fencePrelude runs first in a fenced script: the fence is the last key.
const fencePrelude = "table.remove(KEYS) -- the fence (keys.go): declared, never touched\n"

// newFenced is newScript for a fenced script.
func newFenced(src string) script {
	return script{radix.NewEvalScript(fencePrelude + constants + libFor(src) + src)}
}

// Only four scripts are not fenced: open.lua, extend.lua and pause.lua
// declare the one key they touch (radix follows a node's ASK for it, and a
// node that has the key runs them), and probe.lua declares none (it reads
// many queues of one node: internal/consume/multi.go handles a queue whose slot moves).

// newScript sends src with the protocol's constants and only the helpers of
// lib.lua it uses (and those they use): Redis runs a script's whole text on
// every call, and each helper defined is a closure made on every call, a
// cost on the hot path (take) for nothing.
func newScript(src string) radix.EvalScript {
	return radix.NewEvalScript(constants + libFor(src) + src)
}

var (
	luaFunc    = regexp.MustCompile(`(?m)^local function ([a-z_]+)\(`)
	luaComment = regexp.MustCompile(`--[^\n]*`)
)

// libFor is lib.lua cut to what src needs: its part before the first helper
// (comments and constants), then, in lib.lua's order, each helper src
// names, directly or through another helper it keeps.
func libFor(src string) string {
	starts := luaFunc.FindAllStringSubmatchIndex(libSrc, -1)
	if len(starts) == 0 {
		return libSrc
	}
	// Names count in code only: comments mention helpers they do not call.
	type unit struct {
		name, text, code string // code: text without comments and its own name
		called           *regexp.Regexp
	}
	units := make([]unit, len(starts))
	for i, m := range starts {
		end := len(libSrc)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		name, text := libSrc[m[2]:m[3]], libSrc[m[0]:end]
		units[i] = unit{name: name, text: text,
			code:   luaComment.ReplaceAllString(strings.TrimPrefix(text, "local function "+name), ""),
			called: regexp.MustCompile(`\b` + name + `\b`)}
	}
	srcCode := luaComment.ReplaceAllString(src, "")
	keep := make([]bool, len(units))
	for changed := true; changed; {
		changed = false
		for i, u := range units {
			if keep[i] {
				continue
			}
			if u.called.MatchString(srcCode) {
				keep[i], changed = true, true
				continue
			}
			for j, v := range units {
				if keep[j] && j != i && u.called.MatchString(v.code) {
					keep[i], changed = true, true
					break
				}
			}
		}
	}
	var b strings.Builder
	b.WriteString(libSrc[:starts[0][0]])
	for i, u := range units {
		if keep[i] {
			b.WriteString(u.text)
		}
	}
	return b.String()
}

var (
	//go:embed lua/open.lua
	openSrc    string
	openScript = newScript(openSrc)

	//go:embed lua/enqueue.lua
	enqueueSrc    string
	enqueueScript = newFenced(enqueueSrc)

	//go:embed lua/grouped.lua
	groupedSrc    string
	groupedScript = newFenced(groupedSrc)

	//go:embed lua/promote.lua
	promoteSrc    string
	promoteScript = newFenced(promoteSrc)

	//go:embed lua/cancel.lua
	cancelSrc    string
	cancelScript = newFenced(cancelSrc)

	//go:embed lua/depth.lua
	depthSrc    string
	depthScript = newFenced(depthSrc)

	//go:embed lua/peek.lua
	peekSrc    string
	peekScript = newFenced(peekSrc)

	//go:embed lua/purge.lua
	purgeSrc    string
	purgeScript = newFenced(purgeSrc)

	//go:embed lua/take.lua
	takeSrc    string
	takeScript = newFenced(takeSrc)

	//go:embed lua/fail.lua
	failSrc    string
	failScript = newFenced(failSrc)

	//go:embed lua/top.lua
	topSrc    string
	topScript = newFenced(topSrc)

	// probe.lua starts with its flags (a shebang line), so it gets no
	// prelude: it needs none.
	//go:embed lua/probe.lua
	probeSrc    string
	probeScript = radix.NewEvalScript(probeSrc)

	//go:embed lua/release.lua
	releaseSrc    string
	releaseScript = newFenced(releaseSrc)

	//go:embed lua/extend.lua
	extendSrc    string
	extendScript = newScript(extendSrc)

	//go:embed lua/ack.lua
	ackSrc    string
	ackScript = newFenced(ackSrc)

	//go:embed lua/unpark.lua
	unparkSrc    string
	unparkScript = newFenced(unparkSrc)

	//go:embed lua/groupinflight.lua
	groupInflightSrc    string
	groupInflightScript = newFenced(groupInflightSrc)

	//go:embed lua/grouplimit.lua
	groupLimitSrc    string
	groupLimitScript = newFenced(groupLimitSrc)

	//go:embed lua/sweep.lua
	sweepSrc    string
	sweepScript = newFenced(sweepSrc)

	//go:embed lua/pause.lua
	pauseSrc    string
	pauseScript = newScript(pauseSrc)

	//go:embed lua/dead.lua
	deadSrc    string
	deadScript = newFenced(deadSrc)
)
