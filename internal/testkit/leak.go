package testkit

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// RadixRunner is a function in the stack of every goroutine radix's own
// runner starts for a pool's connections (readers and writers a pool re-dials
// in the background). They belong to the pool, not to the code under test.
const RadixRunner = "github.com/mediocregopher/radix/v4/internal/proc.(*Proc).Run.func1"

// keptIdle is the function an idle kept goroutine of internal/store's
// gopool.go waits in: one between jobs, which ends by itself when no job
// comes (a kept goroutine running a job has the job's frames above it, and
// counts as any other).
const keptIdle = "github.com/prioq/prioq/internal/store.keep"

// idleKept reports whether g is a kept goroutine waiting for a job: its
// innermost frame that is not the runtime's is keep's.
func idleKept(g goroutine) bool {
	for _, f := range g.frames {
		if strings.HasPrefix(f, "runtime.") {
			continue
		}
		return f == keptIdle
	}
	return false
}

// busyKept reports whether g is a kept goroutine running a job: one that
// existed before the test may have taken a job of the test's, and is
// counted as a goroutine of the test's while it runs it.
func busyKept(g goroutine) bool {
	return !idleKept(g) && anyIn(g.frames, []string{keptIdle})
}

// goroutine is one entry of a full stack dump.
type goroutine struct {
	id     string   // "goroutine 17"
	frames []string // the functions of its stack, innermost first, without arguments
	stack  string
}

func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		lines := strings.Split(strings.TrimSpace(string(block)), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		id := lines[0]
		if i := strings.Index(id, " ["); i > 0 {
			id = id[:i]
		}
		var frames []string
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "created by ") {
				continue // a file:line, or the creator (not part of this stack)
			}
			if i := strings.LastIndex(l, "("); i > 0 {
				l = l[:i]
			}
			frames = append(frames, l)
		}
		out = append(out, goroutine{id: id, frames: frames, stack: string(block)})
	}
	return out
}

// NoLeaks checks, when t ends (after every cleanup registered later, so after
// the test's consumers, pools and servers stop), that no goroutine started
// since this call is still running, apart from those with a function of
// ignore anywhere in their stack and idle kept goroutines (gopool.go). Goroutines get up to 5 s to finish. Call it first in a test; tests
// that run in parallel with it would be counted as leaks.
func NoLeaks(t testing.TB, ignore ...string) {
	t.Helper()
	before := map[string]bool{}
	for _, g := range goroutines() {
		before[g.id] = true
	}
	t.Cleanup(func() {
		if t.Failed() {
			return // a failed test may leave goroutines behind; the failure says more
		}
		var left []goroutine
		deadline := time.Now().Add(5 * time.Second)
		for {
			left = left[:0]
			for _, g := range goroutines() {
				if before[g.id] && !busyKept(g) || anyIn(g.frames, ignore) || idleKept(g) {
					continue
				}
				left = append(left, g)
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, g := range left {
			t.Errorf("goroutine left running after the test:\n%s", g.stack)
		}
	})
}

func anyIn(frames, ignore []string) bool {
	for _, f := range frames {
		for _, x := range ignore {
			if f == x {
				return true
			}
		}
	}
	return false
}
