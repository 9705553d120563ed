package prioq

import (
	_ "embed"

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

// prelude is what every script starts with: the protocol's constants, then
// lib.lua.
var prelude = luaConstants() + libSrc

func newScript(src string) radix.EvalScript { return radix.NewEvalScript(prelude + src) }

var (
	//go:embed lua/open.lua
	openSrc    string
	openScript = newScript(openSrc)

	//go:embed lua/enqueue.lua
	enqueueSrc    string
	enqueueScript = newScript(enqueueSrc)

	//go:embed lua/promote.lua
	promoteSrc    string
	promoteScript = newScript(promoteSrc)

	//go:embed lua/cancel.lua
	cancelSrc    string
	cancelScript = newScript(cancelSrc)

	//go:embed lua/peek.lua
	peekSrc    string
	peekScript = newScript(peekSrc)

	//go:embed lua/purge.lua
	purgeSrc    string
	purgeScript = newScript(purgeSrc)

	//go:embed lua/take.lua
	takeSrc    string
	takeScript = newScript(takeSrc)

	//go:embed lua/fail.lua
	failSrc    string
	failScript = newScript(failSrc)

	//go:embed lua/extend.lua
	extendSrc    string
	extendScript = newScript(extendSrc)

	//go:embed lua/ack.lua
	ackSrc    string
	ackScript = newScript(ackSrc)

	//go:embed lua/sweep.lua
	sweepSrc    string
	sweepScript = newScript(sweepSrc)

	//go:embed lua/pause.lua
	pauseSrc    string
	pauseScript = newScript(pauseSrc)

	//go:embed lua/dead.lua
	deadSrc    string
	deadScript = newScript(deadSrc)
)
