package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/mediocregopher/radix/v4/resp"
	"github.com/mediocregopher/radix/v4/resp/resp3"
)

// BenchmarkScriptPrelude measures what the helper definitions every script
// call runs again (its includes: the prelude, lua.go) cost on the hot
// scripts (enqueue.lua, take.lua, ack.lua, fail.lua), three ways in the same
// run, in interleaved rounds on one server:
//
//	evalsha  EVALSHA of includes + script (before funcs.go)
//	fcall    FCALL of the library (funcs.go): the includes' definitions
//	         run once, at FUNCTION LOAD, each script a function
//	pruned   EVALSHA of the script with only the helpers it reaches
//
// A client wrapper rewrites each FCALL the shard sends, so the calls, keys
// and arguments are the shard's own. Per phase (N single calls of one
// script) it reports the Redis CPU per call (INFO commandstats, usec of
// evalsha/fcall over calls) and the wall time per call, and its ratio to
// evalsha of the same round, median over rounds (min–max). Run it alone:
//
//	go test -run '^$' -bench BenchmarkScriptPrelude -benchtime 1x ./internal/store
//	PRIOQ_SERVER=valkey-server go test -run '^$' -bench BenchmarkScriptPrelude -benchtime 1x ./internal/store
func BenchmarkScriptPrelude(b *testing.B) {
	ctx := context.Background()
	hot := map[string]script{"enqueue": enqueueScript, "take": takeScript, "ack": ackScript, "fail": failScript}
	srcs := map[string]string{"enqueue": enqueueSrc, "take": takeSrc, "ack": ackSrc, "fail": failSrc}
	names := []string{"enqueue", "take", "ack", "fail"}

	// The shard sends FCALL (funcs.go); evalsha and pruned rewrite it.
	_, libName := library()
	evalshaOf, prunedOf := map[string]string{}, map[string]string{}
	for _, n := range names {
		fn := libName + "_" + n
		pruned := fencePrelude + prunedText(srcs[n])
		for _, v := range []struct {
			m    map[string]string
			text string
		}{{evalshaOf, fencePrelude + scriptText(srcs[n])}, {prunedOf, pruned}} {
			var sha string
			if err := sharedClient.Do(ctx, radix.Cmd(&sha, "SCRIPT", "LOAD", v.text)); err != nil {
				b.Fatalf("SCRIPT LOAD %s: %v", n, err)
			}
			v.m[fn] = sha
		}
		if sha1hex(hot[n].es) != evalshaOf[fn] {
			b.Fatalf("%s: the EVALSHA text is not the shard's", n)
		}
		fmt.Printf("%s: %d bytes sent today, %d pruned (%d of %d helper definitions kept)\n", n,
			len(fencePrelude+scriptText(srcs[n])), len(pruned), helperCount(pruned), helperCount(scriptText(srcs[n])))
	}

	variants := []string{"evalsha", "fcall", "pruned"}
	const rounds, n = 9, 1000
	// cpu[variant][phase], wall[variant][phase]: one value per round.
	cpu := map[string]map[string][]float64{}
	wall := map[string]map[string][]float64{}
	for _, v := range variants {
		cpu[v], wall[v] = map[string][]float64{}, map[string][]float64{}
	}
	for r := range rounds {
		for i := range variants {
			v := variants[(r+i)%len(variants)]
			// fcall goes through the same rewriting (as itself), so the
			// wall times compare the scripts, not the wrapper.
			c := &rewriteClient{Client: sharedClient, to: map[string]string{}}
			switch v {
			case "evalsha":
				c.to = evalshaOf
			case "pruned":
				c.to = prunedOf
			}
			s := NewShards(c, fmt.Sprintf("prelude-bench-%d-%s", r, v), &Config{Layout: Levels(3), MaxAttempts: 10,
				PromoteBatch: 256, CallTimeout: 10 * time.Second, WaitTimeout: time.Second, Shards: 1})[0]
			if err := s.WriteMeta(ctx, true); err != nil {
				b.Fatal(err)
			}
			benchPhases(b, ctx, s, n, func(phase string, usec, w float64) {
				cpu[v][phase] = append(cpu[v][phase], usec)
				wall[v][phase] = append(wall[v][phase], w)
			})
			if _, err := s.Purge(ctx); err != nil {
				b.Fatal(err)
			}
			sharedClient.Do(ctx, radix.Cmd(nil, "DEL", s.k.meta))
		}
	}
	// A ratio is taken round by round (against evalsha of the same round),
	// then its median; min–max beside it.
	ratio := func(m map[string]map[string][]float64, v, ph string) (med, lo, hi float64) {
		var rs []float64
		for r, x := range m[v][ph] {
			rs = append(rs, x/m["evalsha"][ph][r])
		}
		return median(rs), slices.Min(rs), slices.Max(rs)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-8s %-8s %8s %8s %-18s %-18s\n", "script", "variant", "cpu µs", "wall µs", "cpu × (min–max)", "wall × (min–max)")
	for _, ph := range names {
		for _, v := range variants {
			c, clo, chi := ratio(cpu, v, ph)
			w, wlo, whi := ratio(wall, v, ph)
			fmt.Fprintf(&out, "%-8s %-8s %8.2f %8.2f %.2f (%.2f–%.2f)   %.2f (%.2f–%.2f)\n", ph, v,
				median(cpu[v][ph]), median(wall[v][ph]), c, clo, chi, w, wlo, whi)
			if v != "evalsha" {
				b.ReportMetric(c, ph+"-"+v+"-cpu-x")
			}
		}
	}
	fmt.Print(out.String()) // b.Log cuts a benchmark's log at 10 lines
}

// benchPhases runs n single enqueues with caller ids (enqueue.lua), n takes
// of one (take.lua), n/2 acks (ack.lua) and n/2 retries an hour later
// (fail.lua) on s, and reports for each the Redis CPU per script call and
// the wall time per call, in µs.
func benchPhases(b *testing.B, ctx context.Context, s *Shard, n int, report func(phase string, usec, wall float64)) {
	var ds []*Delivery
	run := func(phase string, calls int, one func(i int)) {
		calls0, usec0 := scriptStats(b, ctx)
		start := time.Now()
		for i := range calls {
			one(i)
		}
		w := float64(time.Since(start).Microseconds()) / float64(calls)
		calls1, usec1 := scriptStats(b, ctx)
		if calls1-calls0 < int64(calls) {
			b.Fatalf("%s: %d script calls, want %d", phase, calls1-calls0, calls)
		}
		report(phase, float64(usec1-usec0)/float64(calls1-calls0), w)
	}
	payload := make([]byte, 64)
	run("enqueue", n, func(i int) {
		id := "job-" + strconv.Itoa(i)
		env := (&Envelope{ID: id, CallerID: true, Priority: 1, EnqueuedMs: time.Now().UnixMilli(), Payload: payload}).Encode()
		res, err := s.Send(ctx, []Item{{ID: id, Caller: true, Lane: 1, Priority: 1, Env: env}})
		if err != nil || res[0].Err != nil {
			b.Fatal(err, res)
		}
	})
	run("take", n, func(int) {
		got, err := s.Take(ctx, TakeArgs{Lanes: s.Keys().HighFirst(), N: 1, Lease: time.Minute})
		if err != nil || len(got.Deliveries) != 1 {
			b.Fatal(err, len(got.Deliveries))
		}
		ds = append(ds, got.Deliveries[0])
	})
	run("ack", n/2, func(i int) {
		if err := s.AckBatch(ctx, []AckReq{ds[i].Req()})[0]; err != nil {
			b.Fatal(err)
		}
	})
	run("fail", n-n/2, func(i int) {
		if _, err := s.Fail(ctx, ds[n/2+i].Token(), time.Hour, "bench", FailRetry); err != nil {
			b.Fatal(err)
		}
	})
}

// scriptStats is the calls and usec of evalsha, eval and fcall so far.
func scriptStats(b *testing.B, ctx context.Context) (calls, usec int64) {
	var info string
	if err := sharedClient.Do(ctx, radix.Cmd(&info, "INFO", "commandstats")); err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, cmd := range []string{"evalsha", "eval", "fcall"} {
			rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":")
			if !ok {
				continue
			}
			for _, f := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(f, "=")
				x, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					calls += x
				case "usec":
					usec += x
				}
			}
		}
	}
	return calls, usec
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func sha1hex(es radix.EvalScript) string {
	var buf bytes.Buffer
	// The sum is radix's; marshal an EVALSHA and read it back.
	a := es.Cmd(nil, nil).(resp.Marshaler)
	if err := a.MarshalRESP(&buf, resp.NewOpts()); err != nil {
		panic(err)
	}
	var args []string
	if err := resp3.Unmarshal(bufReader(&buf), &args, resp.NewOpts()); err != nil {
		panic(err)
	}
	return args[1]
}

// rewriteClient sends each FCALL of a function in to as EVALSHA of the sha
// it maps to.
type rewriteClient struct {
	radix.Client
	to map[string]string
}

func (c *rewriteClient) Do(ctx context.Context, a radix.Action) error {
	if _, ok := a.(*fcall); !ok {
		return c.Client.Do(ctx, a)
	}
	return c.Client.Do(ctx, radix.WithConn(a.Properties().Keys[0], func(ctx context.Context, conn radix.Conn) error {
		return a.Perform(ctx, &rewriteConn{Conn: conn, c: c})
	}))
}

type rewriteConn struct {
	radix.Conn
	c *rewriteClient
}

func (rc *rewriteConn) EncodeDecode(ctx context.Context, m, u any) error {
	var buf bytes.Buffer
	if err := resp3.Marshal(&buf, m, resp.NewOpts()); err != nil {
		return err
	}
	var args []string
	if err := resp3.Unmarshal(bufReader(&buf), &args, resp.NewOpts()); err != nil {
		return err
	}
	if len(args) > 1 && args[0] == "FCALL" {
		if sha, ok := rc.c.to[args[1]]; ok {
			args[0], args[1] = "EVALSHA", sha
		}
	}
	return rc.Conn.EncodeDecode(ctx, args, u)
}

func (rc *rewriteConn) Addr() net.Addr { return rc.Conn.Addr() }

// chunk is one top-level definition of an include with the comment lines
// after it up to the next one.
type chunk struct {
	text  string
	names []string // what it defines
	fn    bool     // a local function
}

func chunksOf(text string) []chunk {
	var out []chunk
	cur := chunk{}
	for _, line := range strings.SplitAfter(text, "\n") {
		if m := topDef.FindStringSubmatch(line); m != nil {
			out = append(out, cur)
			cur = chunk{fn: m[1] != ""}
			if m[1] != "" {
				cur.names = []string{m[1]}
			} else {
				for _, n := range strings.Split(m[2], ",") {
					cur.names = append(cur.names, strings.TrimSpace(n))
				}
			}
		}
		cur.text += line
	}
	return append(out, cur)
}

// codeNames is every name used in the code of src.
func codeNames(src string) map[string]bool {
	out := map[string]bool{}
	luaCode(src, func(code string, isCode bool) {
		if isCode {
			for _, w := range luaName.FindAllString(code, -1) {
				if w[0] != '.' {
					out[w] = true
				}
			}
		}
	})
	return out
}

// prunedText is scriptText(src) with only the include definitions src
// reaches.
func prunedText(src string) string {
	order, err := includeOrder(src)
	if err != nil {
		panic(err)
	}
	var all []chunk
	for _, n := range order {
		all = append(all, chunksOf(includes[n])...)
	}
	need := codeNames(src)
	keep := make([]bool, len(all))
	for changed := true; changed; {
		changed = false
		for i, c := range all {
			if keep[i] || len(c.names) == 0 || !slices.ContainsFunc(c.names, func(n string) bool { return need[n] }) {
				continue
			}
			keep[i], changed = true, true
			for w := range codeNames(c.text) {
				need[w] = true
			}
		}
	}
	var b strings.Builder
	for i, c := range all {
		if keep[i] {
			b.WriteString(c.text)
		}
	}
	b.WriteString(src)
	return inlineConstants(b.String())
}

func helperCount(text string) int {
	return len(regexp.MustCompile(`(?m)^local function `).FindAllString(text, -1))
}

func bufReader(buf *bytes.Buffer) resp.BufferedReader { return bufio.NewReader(buf) }
