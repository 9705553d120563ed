package prioq

import (
	_ "embed"

	"github.com/mediocregopher/radix/v4"
)

// Each script is embedded into its own variable, so a missing file fails the
// build. radix sends EVALSHA and falls back to EVAL on NOSCRIPT, and routes by
// the KEYS it is given, which is what makes the scripts work on Redis Cluster.
var (
	//go:embed lua/open.lua
	openSrc    string
	openScript = radix.NewEvalScript(openSrc)

	//go:embed lua/enqueue.lua
	enqueueSrc    string
	enqueueScript = radix.NewEvalScript(enqueueSrc)

	//go:embed lua/promote.lua
	promoteSrc    string
	promoteScript = radix.NewEvalScript(promoteSrc)

	//go:embed lua/cancel.lua
	cancelSrc    string
	cancelScript = radix.NewEvalScript(cancelSrc)

	//go:embed lua/peek.lua
	peekSrc    string
	peekScript = radix.NewEvalScript(peekSrc)
)

var (
	//go:embed lua/purge.lua
	purgeSrc    string
	purgeScript = radix.NewEvalScript(purgeSrc)
)

var (
	//go:embed lua/take.lua
	takeSrc    string
	takeScript = radix.NewEvalScript(takeSrc)

	//go:embed lua/fail.lua
	failSrc    string
	failScript = radix.NewEvalScript(failSrc)

	//go:embed lua/extend.lua
	extendSrc    string
	extendScript = radix.NewEvalScript(extendSrc)

	//go:embed lua/ack.lua
	ackSrc    string
	ackScript = radix.NewEvalScript(ackSrc)

	//go:embed lua/sweep.lua
	sweepSrc    string
	sweepScript = radix.NewEvalScript(sweepSrc)

	//go:embed lua/dead.lua
	deadSrc    string
	deadScript = radix.NewEvalScript(deadSrc)
)
