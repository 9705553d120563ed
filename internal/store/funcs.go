package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/mediocregopher/radix/v4"
)

// The fenced scripts run as Redis Functions (FCALL) where the server has
// them, and as EVALSHA where it does not (Redis < 7.0, Dragonfly, FCALL or
// FUNCTION renamed away or denied by ACL).
//
// Why: EVALSHA runs a script's whole text on every call, its includes'
// helper definitions too (a closure made per helper per call). In a
// library those definitions run once, at FUNCTION LOAD, and each script is a
// function of it. Measured (BenchmarkScriptPrelude, docs/performance.md):
// 20-30% less Redis CPU per call of enqueue.lua, take.lua and ack.lua.
//
// The library holds every fenced script: the includes they list, each once,
// at the library's top level (lua_test.go checks that no two includes define
// one name), then each script's text as the body of a function. The scripts
// read KEYS and ARGV as they do under EVAL: the library's locals, which each
// function sets first; the includes' other top-level locals (the state of
// one call: lanes.lua's FILLED, parkentry.lua's NLANES and BURIED) are set
// again to their first values. Its name carries a hash of its text, and its
// functions that name, so two versions of prioq on one server each call
// their own.
//
// A library is per node and is not persisted without persistence, nor moved
// by a slot migration: a node that lacks it (a restart, a failover to a node
// that never had it, a slot's new owner, a FUNCTION FLUSH) answers FCALL
// with "Function not found", and the call loads the library on that node's
// connection and sends FCALL again, within the call's deadline, as radix
// sends EVAL after NOSCRIPT. Open loads it on the queue's node first. A node
// that answers FCALL or FUNCTION LOAD with an unknown command or NOPERM is
// remembered (by address) as one without Functions, and its calls go as
// EVALSHA from then on.
//
// Flags: a function is refused as a whole at maxmemory unless it is flagged
// allow-oom, and then none of its writes is refused. Under EVAL a script is
// refused at its first write that may grow memory. So enqueue.lua and
// grouped.lua, whose first write grows memory (refused at maxmemory, nothing
// stored), have no flags; every other script's first write frees memory or
// it writes nothing, so it runs at maxmemory as it does under EVAL:
// allow-oom.

// fencedDef is one fenced script, as newFenced made it.
type fencedDef struct {
	name, src string
	growing   bool // no allow-oom: refused at maxmemory
}

var (
	fencedDefs []fencedDef
	libOnce    sync.Once
	libText    string // the library: FUNCTION LOAD's argument
	libName    string // prioq_<hash>; a function is libName_<script>
)

// library is the text and name of the library of every fenced script.
func library() (text, name string) {
	libOnce.Do(func() { libText, libName = buildLibrary(fencedDefs) })
	return libText, libName
}

// topDef is a top-level definition of an include: a local function, or
// locals with their first values.
var topDef = regexp.MustCompile(`^local (?:function ([A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_, ]*?) *=)`)

// buildLibrary is the library of defs, and its name.
func buildLibrary(defs []fencedDef) (text, name string) {
	var all []string
	for _, d := range defs {
		all = append(all, includeNames(d.src)...)
	}
	order, err := includeOrder("-- include: " + strings.Join(all, ", ") + "\n")
	if err != nil {
		panic(err)
	}
	var b, reset strings.Builder
	b.WriteString("local KEYS, ARGV\n")
	for _, n := range order {
		for _, line := range strings.SplitAfter(includes[n], "\n") {
			if m := topDef.FindStringSubmatch(line); m != nil && m[2] != "" {
				reset.WriteString(strings.TrimPrefix(line, "local "))
			}
		}
		b.WriteString(includes[n])
		b.WriteString("\n")
	}
	for _, d := range defs {
		fmt.Fprintf(&b, "local function script_%s(keys, args)\nKEYS, ARGV = keys, args\n%s%s%s\nend\n", d.name, reset.String(), fencePrelude, d.src)
	}
	body := inlineConstants(b.String())
	sum := sha1.Sum([]byte(body))
	name = "prioq_" + hex.EncodeToString(sum[:6])
	for _, d := range defs {
		flags := "'allow-oom'"
		if d.growing {
			flags = ""
		}
		body += fmt.Sprintf("redis.register_function{function_name = '%s_%s', callback = script_%s, flags = {%s}}\n", name, d.name, d.name, flags)
	}
	return "#!lua name=" + name + "\n" + body, name
}

// noFunctions is the nodes (by address) that run no Functions: their calls
// go as EVALSHA.
var noFunctions sync.Map

// fcall is the call of fenced script sc with keys (the fence last) and args:
// an Action that sends FCALL, or EVALSHA on a node without Functions.
type fcall struct {
	sc         script
	rcv        any
	keys, args []string
}

func (a *fcall) Properties() radix.ActionProperties {
	// As radix's EVALSHA: not in a pipeline, since it may need a second
	// command (FUNCTION LOAD) before its answer.
	return radix.ActionProperties{Keys: a.keys, CanRetry: true, CanShareConn: true}
}

func (a *fcall) Perform(ctx context.Context, conn radix.Conn) error {
	node := conn.Addr().String()
	if _, no := noFunctions.Load(node); no {
		return a.evalsha(ctx, conn)
	}
	err := a.send(ctx, conn)
	switch {
	case funcsRefused(err, "fcall"):
		noFunctions.Store(node, true)
		return a.evalsha(ctx, conn)
	case !functionMissing(err):
		return err
	}
	if lerr := loadLibrary(ctx, conn); lerr != nil {
		if funcsRefused(lerr, "function") {
			noFunctions.Store(node, true)
		}
		// Not loaded (refused, or at maxmemory: FUNCTION LOAD may grow
		// memory, EVAL does not): this call goes as EVALSHA.
		return a.evalsha(ctx, conn)
	}
	return a.send(ctx, conn)
}

func (a *fcall) send(ctx context.Context, conn radix.Conn) error {
	_, name := library()
	args := make([]string, 0, 2+len(a.keys)+len(a.args))
	args = append(args, name+"_"+a.sc.name, strconv.Itoa(len(a.keys)))
	args = append(append(args, a.keys...), a.args...)
	return radix.Cmd(a.rcv, "FCALL", args...).Perform(ctx, conn)
}

func (a *fcall) evalsha(ctx context.Context, conn radix.Conn) error {
	return a.sc.es.Cmd(a.rcv, a.keys, a.args...).Perform(ctx, conn)
}

// loadLibrary loads the library on conn's node; one already there (loaded by
// another call, or another process of this version) is fine.
func loadLibrary(ctx context.Context, conn radix.Conn) error {
	text, _ := library()
	err := radix.Cmd(nil, "FUNCTION", "LOAD", text).Perform(ctx, conn)
	if err != nil && isReply(err) && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}

// LoadLibrary loads the scripts' library on the node of the shard's slot
// (Open's call), and reports whether that node runs Functions. A node that
// refuses is remembered as one without; other failures are left to the
// first call, which loads the library when it is missing.
func (s *Shard) LoadLibrary(ctx context.Context) (bool, error) {
	a := &loadAction{key: s.k.slotKey()}
	err := s.do(ctx, a)
	return a.funcs, err
}

// loadAction loads the library on the node of key, on a shared connection
// (not WithConn: see onNodeOf).
type loadAction struct {
	key   string
	funcs bool
}

func (a *loadAction) Properties() radix.ActionProperties {
	return radix.ActionProperties{Keys: []string{a.key}, CanRetry: true, CanShareConn: true}
}

func (a *loadAction) Perform(ctx context.Context, conn radix.Conn) error {
	node := conn.Addr().String()
	if _, no := noFunctions.Load(node); no {
		a.funcs = false
		return nil
	}
	err := loadLibrary(ctx, conn)
	if funcsRefused(err, "function") {
		noFunctions.Store(node, true)
		a.funcs = false
		return nil
	}
	a.funcs = err == nil
	return err
}

// functionMissing reports whether err is FCALL's answer on a node that
// lacks the function.
func functionMissing(err error) bool {
	return isReply(err) && strings.Contains(strings.ToLower(err.Error()), "function not found")
}

// funcsRefused reports whether err is a node's refusal of command cmd
// (fcall, function) as such: unknown, or denied by ACL.
func funcsRefused(err error, cmd string) bool {
	if !isReply(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown command") && strings.Contains(msg, cmd) ||
		strings.Contains(msg, "unknown subcommand") || strings.HasPrefix(msg, "noperm")
}
