// Command prioq operates prioq queues from a shell: list them, read their
// state, peek, enqueue, cancel, handle dead letters, pause, resume and purge.
//
//	prioq [--url URL] <command> [flags] [args]
//
// The URL (or $PRIOQ_URL; default redis://127.0.0.1:6379) is
// redis://[user:password@]host:port[/db], rediss:// for TLS,
// redis+sentinel://host:port[,host:port...]/master, or
// redis+cluster://host:port[,host:port...].
//
// Exit codes: 0 done; 1 the operation failed (a Redis error, an id not
// found); 2 bad input: a usage error, an unknown queue, a priority outside
// the queue's layout, Redis unreachable. Errors are one line on stderr.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/dashboard"
	"github.com/prioq/prioq/internal/fanout"
)

const usage = `usage: prioq [--url URL] <command> [flags] [args]

commands:
  create <queue> [--layout levels:N|range:LO:HI:SEGMENTS] [--mode at-least-once|at-most-once] [--shards N]
  queues [pattern] [--sort name|ready|oldest|rate] [--window D] [--json]
                                  the queues with depth, oldest ready and rates over D
  stats <queue> [--json] [--watch D] [--groups N]
                                  with the N most loaded groups (10 by default)
  peek <queue> [-n N] [--payload]
  enqueue <queue> [--priority P] [--delay D] [--id ID] [--group G] [--header k=v]... [payload | -]
  limit <queue> <group | '*'> <concurrency> [--rate N/D]
                                  a group's limits, both replaced ('*': every group's;
                                  0 and no --rate: no limit)
  rate <queue> <N/D | none>       the queue's rate limit: at most N taken in any window D
  cancel <queue> <id>
  dead <queue> list [-n N] [--payload] | show <id> | requeue <id> | requeue-all | purge [--yes]
  pause <queue> | resume <queue>
  purge <queue> [--yes]
  web [--addr host:port] [--read-only] [--payloads] [queue...]   the dashboard (all queues by default)
`

// exitError carries an exit code with its one-line message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func bad(format string, a ...any) error { return &exitError{2, fmt.Sprintf(format, a...)} }

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout)
	if err == nil {
		return
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	} else if isBadInput(err) {
		code = 2
	}
	fmt.Fprintln(os.Stderr, "prioq:", strings.TrimPrefix(err.Error(), "prioq: "))
	os.Exit(code)
}

// isBadInput tells prioq's input errors from failures.
func isBadInput(err error) bool {
	for _, e := range []error{prioq.ErrInvalidPriority, prioq.ErrInvalidID, prioq.ErrInvalidName, prioq.ErrEmptyPayload,
		prioq.ErrPayloadTooLarge, prioq.ErrInvalidOption, prioq.ErrInvalidHeader, prioq.ErrWrongMode} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	global := flag.NewFlagSet("prioq", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	def := os.Getenv("PRIOQ_URL")
	if def == "" {
		def = "redis://127.0.0.1:6379"
	}
	rawURL := global.String("url", def, "")
	if err := global.Parse(args); err != nil || global.NArg() == 0 {
		return bad("%s", strings.TrimSpace(usage))
	}
	cmd, rest := global.Arg(0), global.Args()[1:]
	if cmd == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	known := map[string]bool{"create": true, "queues": true, "stats": true, "peek": true, "enqueue": true, "cancel": true,
		"dead": true, "pause": true, "resume": true, "purge": true, "web": true, "limit": true, "rate": true}
	if !known[cmd] {
		return bad("unknown command %q (prioq help lists them)", cmd)
	}
	client, err := connect(ctx, *rawURL)
	if err != nil {
		return err
	}
	defer client.Close()
	if cmd == "queues" {
		return listQueues(ctx, client, rest, stdout)
	}
	if cmd == "create" {
		return create(ctx, client, rest, stdout)
	}
	if cmd == "web" {
		return web(ctx, client, rest, stdout)
	}
	if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
		return bad("%s needs a queue name", cmd)
	}
	q, err := prioq.OpenExisting(ctx, client, rest[0], prioq.Config{AllowEviction: true, Logger: quietLogger()})
	if errors.Is(err, prioq.ErrNotFound) {
		return bad("no queue %q", rest[0])
	}
	if err != nil {
		return err
	}
	rest = rest[1:]
	switch cmd {
	case "stats":
		return stats(ctx, q, rest, stdout)
	case "peek":
		return peek(ctx, q, rest, stdout)
	case "enqueue":
		return enqueue(ctx, q, rest, stdin, stdout)
	case "cancel":
		if len(rest) != 1 {
			return bad("usage: prioq cancel <queue> <id>")
		}
		if err := q.Cancel(ctx, rest[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "cancelled %s\n", rest[0])
		return nil
	case "dead":
		return dead(ctx, q, rest, stdin, stdout)
	case "limit":
		return limit(ctx, q, rest, stdout)
	case "rate":
		if len(rest) != 1 {
			return bad("usage: prioq rate <queue> <N/D | none>")
		}
		r, err := parseRate(rest[0])
		if err != nil {
			return err
		}
		if err := q.SetRateLimit(ctx, r); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: rate limit %s\n", q.Name(), r)
		return nil
	case "pause", "resume":
		if len(rest) != 0 {
			return bad("usage: prioq %s <queue>", cmd)
		}
		f := q.Pause
		if cmd == "resume" {
			f = q.Resume
		}
		if err := f(ctx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %sd\n", q.Name(), cmd)
		return nil
	default: // purge
		return purgeConfirmed(ctx, "purge", rest, stdin, stdout,
			fmt.Sprintf("delete every waiting message of %q?", q.Name()), "messages", q.Purge)
	}
}

// redisClient is what the three kinds of client (pool, Sentinel, Cluster)
// have in common.
type redisClient interface {
	Do(context.Context, radix.Action) error
	Close() error
}

// connect opens a client for the URL and checks that Redis answers.
func connect(ctx context.Context, raw string) (redisClient, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, bad("bad --url %q: want redis://host:port, rediss://, redis+sentinel:// or redis+cluster://", raw)
	}
	dc := prioq.DialerConfig{}
	if u.User != nil {
		dc.Base.AuthUser = u.User.Username()
		dc.Base.AuthPass, _ = u.User.Password()
		if _, set := u.User.Password(); !set { // redis://password@host
			dc.Base.AuthUser, dc.Base.AuthPass = "", u.User.Username()
		}
	}
	path := strings.Trim(u.Path, "/")
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var client redisClient
	switch u.Scheme {
	case "redis", "rediss":
		if u.Scheme == "rediss" {
			dc.TLS = &tls.Config{ServerName: u.Hostname()}
		}
		if path != "" {
			if _, err := strconv.Atoi(path); err != nil {
				return nil, bad("bad database %q in --url", path)
			}
			dc.Base.SelectDB = path
		}
		var pool radix.Client
		pool, err = radix.PoolConfig{Size: 4, Dialer: prioq.Dialer(dc)}.New(cctx, "tcp", u.Host)
		client = pool
	case "redis+sentinel":
		if path == "" {
			return nil, bad("redis+sentinel:// needs the master's name as its path")
		}
		var sc *radix.Sentinel
		sc, err = (radix.SentinelConfig{PoolConfig: radix.PoolConfig{Size: 4, Dialer: prioq.Dialer(dc)}}).New(cctx, path, strings.Split(u.Host, ","))
		client = sc
	case "redis+cluster":
		var cl *radix.Cluster
		cl, err = (radix.ClusterConfig{PoolConfig: prioq.LazyPools(radix.PoolConfig{Size: 4, Dialer: prioq.Dialer(dc)})}).New(cctx, strings.Split(u.Host, ","))
		client = cl
	default:
		return nil, bad("unknown --url scheme %q", u.Scheme)
	}
	if err != nil {
		return nil, bad("cannot reach Redis at %s: %v", u.Redacted(), err)
	}
	if err := client.Do(cctx, radix.Cmd(nil, "PING")); err != nil {
		client.Close()
		return nil, bad("cannot reach Redis at %s: %v", u.Redacted(), err)
	}
	return client, nil
}

// web serves the dashboard until the process is stopped. It has no
// authentication of its own: it listens on loopback unless told otherwise.
func web(ctx context.Context, c redisClient, args []string, w io.Writer) error {
	fs := newFlags("web")
	addr := fs.String("addr", "127.0.0.1:8080", "")
	readOnly := fs.Bool("read-only", false, "")
	payloads := fs.Bool("payloads", false, "")
	names, err := parse(fs, args, -1)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		if names, err = prioq.ListQueues(ctx, c, ""); err != nil {
			return err
		}
	}
	if len(names) == 0 {
		return bad("web: no queues found (name them as arguments)")
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Queues: names, ReadOnly: *readOnly, ShowPayloads: *payloads})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "dashboard of %d queue(s) on http://%s/\n", len(names), *addr)
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// create creates a queue, as Open does: a queue that exists already with
// the same configuration is left as it is (and said so); with another one,
// ErrConfigMismatch.
func create(ctx context.Context, c redisClient, args []string, w io.Writer) error {
	fs := newFlags("create")
	layout := fs.String("layout", "levels:3", "")
	mode := fs.String("mode", prioq.AtLeastOnce.String(), "")
	shards := fs.Int("shards", 1, "")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return bad("usage: prioq create <queue> [--layout levels:N|range:LO:HI:SEGMENTS] [--mode at-least-once|at-most-once] [--shards N]")
	}
	l, err := prioq.ParseLayout(*layout)
	if err != nil {
		return bad("%s (levels:N or range:LO:HI:SEGMENTS)", strings.TrimPrefix(err.Error(), "prioq: "))
	}
	var m prioq.Mode
	switch *mode {
	case prioq.AtLeastOnce.String():
		m = prioq.AtLeastOnce
	case prioq.AtMostOnce.String():
		m = prioq.AtMostOnce
	default:
		return bad("unknown mode %q (at-least-once or at-most-once)", *mode)
	}
	if *shards < 1 {
		return bad("--shards %d: at least 1", *shards)
	}
	existed := false
	if _, err := prioq.OpenExisting(ctx, c, pos[0], prioq.Config{AllowEviction: true, Logger: quietLogger()}); err == nil {
		existed = true
	}
	q, err := prioq.Open(ctx, c, pos[0], prioq.Config{Layout: l, Mode: m, Shards: *shards, Logger: quietLogger()})
	if errors.Is(err, prioq.ErrConfigMismatch) {
		return &exitError{2, strings.TrimPrefix(err.Error(), "prioq: ")}
	}
	if err != nil {
		return err
	}
	verb := "created"
	if existed {
		verb = "exists"
	}
	fmt.Fprintf(w, "%s %s (%s, %s, %d shard(s))\n", verb, q.Name(), q.Layout(), q.Mode(), q.Shards())
	return nil
}

// queueRow is one line of `prioq queues`.
type queueRow struct {
	Name        string  `json:"queue"`
	Layout      string  `json:"layout"`
	Mode        string  `json:"mode"`
	Shards      int     `json:"shards"`
	Ready       int64   `json:"ready"`
	Delayed     int64   `json:"delayed"`
	InFlight    int64   `json:"in_flight"`
	Dead        int64   `json:"dead"`
	OldestReady float64 `json:"oldest_ready_seconds"`
	Paused      bool    `json:"paused"`
	EnqRate     float64 `json:"enqueued_per_second"`
	AckRate     float64 `json:"acked_per_second"`
	err         error
}

// statsWorkers is how many queues `prioq queues` reads at once.
const statsWorkers = 32

// listQueues prints the queues matching a pattern with their figures, rates
// over --window (two readings of the totals), sorted.
func listQueues(ctx context.Context, c redisClient, args []string, w io.Writer) error {
	fs := newFlags("queues")
	sortBy := fs.String("sort", "name", "")
	window := fs.Duration("window", time.Second, "")
	asJSON := fs.Bool("json", false, "")
	pos, err := parse(fs, args, -1)
	if err != nil || len(pos) > 1 {
		return bad("usage: prioq queues [pattern] [--sort name|ready|oldest|rate] [--window D] [--json]")
	}
	less := map[string]func(a, b queueRow) int{
		"name":   func(a, b queueRow) int { return strings.Compare(a.Name, b.Name) },
		"ready":  func(a, b queueRow) int { return cmp.Compare(b.Ready, a.Ready) },
		"oldest": func(a, b queueRow) int { return cmp.Compare(b.OldestReady, a.OldestReady) },
		"rate":   func(a, b queueRow) int { return cmp.Compare(b.EnqRate, a.EnqRate) },
	}[*sortBy]
	if less == nil {
		return bad("--sort %q: name, ready, oldest or rate", *sortBy)
	}
	pattern := ""
	if len(pos) == 1 {
		pattern = pos[0]
	}
	names, err := prioq.ListQueues(ctx, c, pattern)
	if err != nil {
		return err
	}
	rows := make([]queueRow, len(names))
	qs := make([]*prioq.Queue, len(names))
	first := make([]prioq.Stats, len(names))
	fanout.Each(len(names), statsWorkers, func(i int) {
		q, err := prioq.OpenExisting(ctx, c, names[i], prioq.Config{AllowEviction: true, Logger: quietLogger()})
		if err == nil {
			qs[i] = q
			first[i], err = q.Stats(ctx)
		}
		rows[i] = queueRow{Name: names[i], err: err}
	})
	start := time.Now()
	if *window > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(*window):
		}
	}
	fanout.Each(len(names), statsWorkers, func(i int) {
		if qs[i] == nil || rows[i].err != nil {
			return
		}
		st, err := qs[i].Stats(ctx)
		if err != nil {
			rows[i].err = err
			return
		}
		q, dt := qs[i], time.Since(start).Seconds()
		rows[i] = queueRow{Name: q.Name(), Layout: q.Layout().String(), Mode: q.Mode().String(), Shards: q.Shards(),
			Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight, Dead: st.Dead,
			OldestReady: st.OldestReady.Seconds(), Paused: st.Paused}
		if *window > 0 {
			rows[i].EnqRate = float64(st.Enqueued-first[i].Enqueued) / dt
			rows[i].AckRate = float64(st.Acked-first[i].Acked) / dt
		}
	})
	slices.SortStableFunc(rows, func(a, b queueRow) int {
		return cmp.Or(less(a, b), strings.Compare(a.Name, b.Name))
	})
	if *asJSON {
		for _, r := range rows {
			if r.err != nil {
				b, _ := json.Marshal(map[string]string{"queue": r.Name, "error": r.err.Error()})
				fmt.Fprintln(w, string(b))
				continue
			}
			b, _ := json.Marshal(r)
			fmt.Fprintln(w, string(b))
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "queue\tready\tdelayed\tin flight\tdead\toldest ready\tenqueued/s\tacked/s\tpaused")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\terror: %v\n", r.Name, r.err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%.1f\t%.1f\t%v\n", r.Name, r.Ready, r.Delayed, r.InFlight, r.Dead,
			time.Duration(r.OldestReady*float64(time.Second)).Round(time.Millisecond), r.EnqRate, r.AckRate, r.Paused)
	}
	return tw.Flush()
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses flags that may come before or after the positional
// arguments and returns those, wanting exactly want of them (-1: any).
func parse(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, bad("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) > 0 {
			pos = append(pos, args[0])
			args = args[1:]
		}
	}
	if want >= 0 && len(pos) != want {
		return nil, bad("%s: want %d argument(s), got %d", fs.Name(), want, len(pos))
	}
	return pos, nil
}

// purgeConfirmed is the purge commands: it asks question unless --yes is in
// args, then runs purge and says how many of what it deleted.
func purgeConfirmed(ctx context.Context, name string, args []string, in io.Reader, out io.Writer,
	question, what string, purge func(context.Context) (int64, error)) error {
	fs := newFlags(name)
	yes := fs.Bool("yes", false, "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if !*yes && !confirm(in, out, question) {
		return &exitError{1, "not confirmed: nothing deleted (--yes skips the question)"}
	}
	n, err := purge(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "purged %d %s\n", n, what)
	return nil
}

func confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s [y/N] ", question)
	var answer string
	_, _ = fmt.Fscanln(in, &answer)
	return answer == "y" || answer == "yes"
}

// shardsJSON is what stats --json says of each shard of a queue of several.
func shardsJSON(st prioq.Stats) []map[string]any {
	var out []map[string]any
	for i, s := range st.Shards {
		out = append(out, map[string]any{"shard": i, "slot": s.Slot, "node": s.Node, "ready": s.Ready, "delayed": s.Delayed, "in_flight": s.InFlight, "dead": s.Dead})
	}
	return out
}

func stats(ctx context.Context, q *prioq.Queue, args []string, w io.Writer) error {
	fs := newFlags("stats")
	asJSON := fs.Bool("json", false, "")
	watch := fs.Duration("watch", 0, "")
	topGroups := fs.Int("groups", 10, "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	var prev prioq.Stats
	var prevAt time.Time
	for {
		st, err := q.Stats(ctx)
		if err != nil {
			return err
		}
		var groups []prioq.GroupStats
		if st.Groups > 0 || st.InFlight > 0 {
			if groups, err = q.Groups(ctx, *topGroups); err != nil {
				return err
			}
		}
		var rate prioq.Rate
		if q.Mode() == prioq.AtLeastOnce {
			if rate, err = q.RateLimit(ctx); err != nil {
				return err
			}
		}
		now := time.Now()
		// With --watch, rates over the interval since the last line: the
		// change of the queue's totals (prioq.Stats) over the time between.
		var enqRate, ackRate *float64
		if !prevAt.IsZero() && st.Enqueued >= prev.Enqueued && st.Acked >= prev.Acked {
			dt := now.Sub(prevAt).Seconds()
			e, a := float64(st.Enqueued-prev.Enqueued)/dt, float64(st.Acked-prev.Acked)/dt
			enqRate, ackRate = &e, &a
		}
		prev, prevAt = st, now
		if *asJSON {
			out := map[string]any{"queue": q.Name(), "layout": q.Layout().String(), "mode": q.Mode().String(),
				"lanes": st.Lanes, "ready": st.Ready, "delayed": st.Delayed, "in_flight": st.InFlight, "dead": st.Dead,
				"oldest_ready_seconds": st.OldestReady.Seconds(), "paused": st.Paused,
				"enqueued_total": st.Enqueued, "acked_total": st.Acked, "groups": st.Groups, "top_groups": groupsJSON(groups), "rate_limit": rate.String()}
			if enqRate != nil {
				out["enqueued_per_second"], out["acked_per_second"] = *enqRate, *ackRate
			}
			if len(st.Shards) > 0 {
				out["shards"] = shardsJSON(st)
			}
			b, _ := json.Marshal(out)
			fmt.Fprintln(w, string(b))
		} else {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "queue\t%s (%s, %s)\n", q.Name(), q.Layout(), q.Mode())
			for i := len(st.Lanes) - 1; i >= 0; i-- {
				fmt.Fprintf(tw, "lane %d\t%d\n", i, st.Lanes[i])
			}
			fmt.Fprintf(tw, "ready\t%d\ndelayed\t%d\nin flight\t%d\ndead\t%d\noldest ready\t%v\npaused\t%v\n",
				st.Ready, st.Delayed, st.InFlight, st.Dead, st.OldestReady.Round(time.Millisecond), st.Paused)
			fmt.Fprintf(tw, "enqueued (total)\t%d\nacked (total)\t%d\n", st.Enqueued, st.Acked)
			if enqRate != nil {
				fmt.Fprintf(tw, "enqueued/s\t%.1f\nacked/s\t%.1f\n", *enqRate, *ackRate)
			}
			fmt.Fprintf(tw, "rate limit\t%s\ngroups\t%d\n", rate, st.Groups)
			tw.Flush()
			if len(groups) > 0 {
				tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "group\tready\tin flight\tlimit\trate\tat limit")
				for _, g := range groups {
					at := fmt.Sprint(g.Parked)
					if g.RateParked {
						at = "rate"
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", g.Group, g.Ready, g.InFlight, g.Limit, g.Rate, at)
				}
				tw.Flush()
			}
			if len(st.Shards) > 0 {
				tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "shard\tslot\tnode\tready\tdelayed\tin flight\tdead")
				for i, s := range st.Shards {
					fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%d\n", i, s.Slot, cmp.Or(s.Node, "-"), s.Ready, s.Delayed, s.InFlight, s.Dead)
				}
				tw.Flush()
			}
		}
		if *watch <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*watch):
		}
	}
}

func showPayload(b []byte, show bool) string {
	if !show {
		return fmt.Sprintf("(%d bytes)", len(b))
	}
	return strconv.Quote(string(b))
}

func peek(ctx context.Context, q *prioq.Queue, args []string, w io.Writer) error {
	fs := newFlags("peek")
	n := fs.Int("n", 10, "")
	payload := fs.Bool("payload", false, "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	msgs, err := q.Peek(ctx, *n)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tpriority\tattempts\tenqueued\tpayload")
	for _, m := range msgs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", m.ID, m.Priority, m.Attempts, m.EnqueuedAt.UTC().Format(time.RFC3339), showPayload(m.Payload, *payload))
	}
	return tw.Flush()
}

type headerFlags map[string]string

func (h headerFlags) String() string { return "" }
func (h headerFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("header %q: want key=value", v)
	}
	h[k] = val
	return nil
}

func enqueue(ctx context.Context, q *prioq.Queue, args []string, stdin io.Reader, w io.Writer) error {
	fs := newFlags("enqueue")
	prio := fs.Int64("priority", 0, "")
	delay := fs.Duration("delay", 0, "")
	id := fs.String("id", "", "")
	group := fs.String("group", "", "")
	headers := headerFlags{}
	fs.Var(headers, "header", "")
	pos, err := parse(fs, args, -1)
	if err != nil {
		return err
	}
	var payload []byte
	switch {
	case len(pos) > 1:
		return bad("enqueue: one payload at most (or - for stdin)")
	case len(pos) == 0 || pos[0] == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
		if err != nil {
			return err
		}
		payload = b
	default:
		payload = []byte(pos[0])
	}
	opts := []prioq.Option{prioq.Headers(headers), prioq.Delay(*delay)}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "priority":
			opts = append(opts, prioq.Priority(*prio))
		case "id":
			opts = append(opts, prioq.ID(*id))
		case "group":
			opts = append(opts, prioq.Group(*group))
		}
	})
	got, err := q.Enqueue(ctx, payload, opts...)
	if errors.Is(err, prioq.ErrDuplicate) {
		return &exitError{1, fmt.Sprintf("enqueue: id %q is already alive in %q", got, q.Name())}
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(w, got)
	return nil
}

func dead(ctx context.Context, q *prioq.Queue, args []string, stdin io.Reader, w io.Writer) error {
	if len(args) == 0 {
		return bad("usage: prioq dead <queue> list|show|requeue|requeue-all|purge")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list", "show":
		fs := newFlags("dead " + sub)
		payload := fs.Bool("payload", sub == "show", "")
		limit, want := 20, 0
		if sub == "list" {
			fs.IntVar(&limit, "n", limit, "")
		} else {
			want = 1
		}
		pos, err := parse(fs, args, want)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "id\tpriority\tattempts\tdied\treason\tpayload")
		row := func(d prioq.DeadLetter) {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", d.ID, d.Priority, d.Attempts, d.DiedAt.UTC().Format(time.RFC3339),
				strconv.Quote(d.Reason), showPayload(d.Payload, *payload))
		}
		if sub == "list" {
			letters, err := q.DeadLetters(ctx, 0, limit)
			if err != nil {
				return err
			}
			for _, d := range letters {
				row(d)
			}
			return tw.Flush()
		}
		// show: page through the list, a page at a time, until the id.
		const page = 500
		for start := 0; ; start += page {
			letters, err := q.DeadLetters(ctx, start, page)
			if err != nil {
				return err
			}
			for _, d := range letters {
				if d.ID == pos[0] {
					row(d)
					return tw.Flush()
				}
			}
			if len(letters) < page {
				return &exitError{1, fmt.Sprintf("dead show: no dead letter %q", pos[0])}
			}
		}
	case "requeue":
		if len(args) != 1 {
			return bad("usage: prioq dead <queue> requeue <id>")
		}
		if err := q.RequeueDead(ctx, args[0]); err != nil {
			return err
		}
		fmt.Fprintf(w, "requeued %s\n", args[0])
		return nil
	case "requeue-all":
		n, err := q.RequeueAllDead(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "requeued %d\n", n)
		return nil
	case "purge":
		return purgeConfirmed(ctx, "dead purge", args, stdin, w,
			fmt.Sprintf("delete every dead letter of %q?", q.Name()), "dead letters", q.PurgeDead)
	}
	return bad("unknown dead command %q", sub)
}

// quietLogger keeps prioq's own log lines to warnings and worse, on stderr.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// groupsJSON is the groups of stats --json (an empty list, not null).
func groupsJSON(gs []prioq.GroupStats) []map[string]any {
	out := []map[string]any{}
	for _, g := range gs {
		out = append(out, map[string]any{"group": g.Group, "ready": g.Ready, "in_flight": g.InFlight, "limit": g.Limit,
			"rate": g.Rate.String(), "at_limit": g.Parked, "at_rate_limit": g.RateParked})
	}
	return out
}

// limit sets a group's limits ('*': every group's).
func limit(ctx context.Context, q *prioq.Queue, args []string, w io.Writer) error {
	fs := newFlags("limit")
	rate := fs.String("rate", "none", "")
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(pos[1])
	if err != nil || n < 0 {
		return bad("limit: concurrency %q is not a count (0 removes the limit)", pos[1])
	}
	r, err := parseRate(*rate)
	if err != nil {
		return err
	}
	group := pos[0]
	if group == "*" {
		group = ""
	}
	if err := q.SetGroupLimit(ctx, group, prioq.GroupLimit{Concurrency: n, Rate: r}); err != nil {
		return err
	}
	switch {
	case n == 0 && r.N == 0:
		fmt.Fprintf(w, "%s: group %s without a limit\n", q.Name(), pos[0])
	case r.N == 0:
		fmt.Fprintf(w, "%s: group %s limited to %d in flight\n", q.Name(), pos[0], n)
	case n == 0:
		fmt.Fprintf(w, "%s: group %s limited to %s taken\n", q.Name(), pos[0], r)
	default:
		fmt.Fprintf(w, "%s: group %s limited to %d in flight, %s taken\n", q.Name(), pos[0], n, r)
	}
	return nil
}

// parseRate reads a rate limit, "N/D" (100/1s: at most 100 taken in any
// second), or "none".
func parseRate(v string) (prioq.Rate, error) {
	if v == "none" || v == "0" {
		return prioq.Rate{}, nil
	}
	ns, ds, ok := strings.Cut(v, "/")
	n, err1 := strconv.Atoi(ns)
	d, err2 := time.ParseDuration(ds)
	if !ok || err1 != nil || err2 != nil || n <= 0 || d <= 0 {
		return prioq.Rate{}, bad("rate %q is not N/D (such as 100/1s) nor none", v)
	}
	return prioq.Rate{N: n, Per: d}, nil
}
