package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prioq/prioq"
)

// command is one of prioq's commands: how it is called, what it does, its
// flags, and, for the commands about one queue, what runs it.
type command struct {
	args    string // after the command's name
	about   string // one line, for the list of commands
	details string // paragraphs and flags, for its --help
	onQueue func(ctx context.Context, q *prioq.Queue, args []string, stdin io.Reader, stdout io.Writer) error
}

var commands = map[string]*command{
	"create": {args: "<queue> [--layout levels:N|range:LO:HI:SEGMENTS] [--mode at-least-once|at-most-once] [--shards N]",
		about: "create a queue (\"exists\" when it does, with the same configuration)",
		details: `  --layout L    levels:N (N lanes) or range:LO:HI:SEGMENTS (default levels:3)
  --mode M      at-least-once (default) or at-most-once
  --shards N    shards, fixed at creation (default 1)`},
	"queues": {args: "[pattern] [--sort name|ready|oldest|rate] [--window D | --no-rates] [-n N] [--json]",
		about: "the queues with their depths, oldest ready and rates",
		details: `Every queue whose name matches pattern (a glob: * matches any characters,
"/" included), found by SCAN on every primary, with its figures read twice
--window apart for its rates.

  --sort S      name (default), ready, oldest or rate (enqueued/s)
  --window D    the rates' window (default 1s; at least 10ms)
  --no-rates    one reading, no rates, no wait
  -n N          the first N queues only (default: all); says "N of M" when it cuts
  --json        one JSON object per queue`},
	"stats": {args: "<queue> [--json] [--watch D] [--groups N]",
		about:   "a queue's lanes, depths, oldest ready, totals, limits and groups",
		onQueue: stats,
		details: `  --json        one JSON object (with --watch, one a line)
  --watch D     read again every D (at least 10ms) until Ctrl-C, with the rates
                over each interval; on a terminal the block is redrawn in place,
                elsewhere one block follows another. When Redis cannot be read it
                says so and keeps trying.
  --groups N    the N most loaded groups (default 10)`},
	"peek": {args: "<queue> [--state ready|delayed|in-flight] [-n N] [--from K] [--payload]",
		about: "the next messages, without taking them; or the delayed ones, or those in flight", onQueue: peek,
		details: `  --state S     ready (default: the next to be taken), delayed (soonest due
                first) or in-flight (soonest lease end first, with when taken)
  -n N          how many (default 10); says "N of M ready" when there are more
  --from K      delayed and in-flight: skip the first K (a page)
  --payload     show payloads (hidden by default: they may hold personal data)`},
	"enqueue": {args: "<queue> [--priority P] [--delay D] [--id ID] [--group G] [--header k=v]... [payload | -]",
		about: "enqueue a message (the payload from stdin with - or none)", onQueue: enqueue,
		details: `  --priority P  its priority (default 0: the lowest lane)
  --delay D     deliver it D from now
  --id ID       its id (a live message with the same id refuses it)
  --group G     its group (see prioq limit)
  --header k=v  a header, repeatable`},
	"limit": {args: "<queue> <group | '*'> <concurrency> [--rate N/D]", onQueue: limit,
		about:   "a group's limits, both replaced ('*': every group's; 0 and no --rate: none)",
		details: `  --rate N/D    at most N taken in any window D (D at least 10ms); none (default)`},
	"rate": {args: "<queue> <N/D | none>", onQueue: rate,
		about:   "the queue's rate limit: at most N taken in any window D",
		details: `D is at least 10ms; none removes the limit.`},
	"schedules": {args: "<queue> [--payload]", about: "the queue's schedules, with their next and last fire times",
		onQueue: schedulesList, details: `  --payload     show payloads (hidden by default: they may hold personal data)`},
	"schedule": {args: "add <queue> <name> <spec> <payload> [--priority P] [--group G] [--header k=v]... [--missed M] | rm <queue> <name>",
		about: "add or replace a schedule (a message enqueued at each tick), or remove one", onQueue: schedule,
		details: `The consumers of the queue enqueue each tick once (docs/schedules.md).

  add           spec: 5 cron fields (minute hour day month weekday), 6 with
                seconds first, "@every D", @hourly, @daily, @weekly, @monthly,
                @yearly; "CRON_TZ=Europe/Paris " in front for a time zone.
                Quote it: prioq schedule add q nightly "0 3 * * *" report
  --priority P  its messages' priority (default 0: the lowest lane)
  --group G     their group
  --header k=v  a header, repeatable
  --missed M    ticks missed while no consumer ran: once (default: one
                message, the latest), skip (none) or all (each, the latest 100)
  rm <name>     remove it (its messages enqueued stay)`},
	"show": {args: "<queue> <id> [--payload]", about: "one message by id, wherever it is: its state, times and headers", onQueue: show,
		details: `Ready (its lane and place), delayed (when due), in flight (when taken, when
its lease ends, its lease token, its progress) or dead (when, why), else
finished with a record kept (its outcome, result: see prioq result). Ready, in-flight and
dead messages are found by reading them a bounded piece at a time (O(depth));
a message that moves back to a place already read may be missed: ask again.

  --payload     show the payload, quoted (hidden by default: it may hold personal data)`},
	"result": {args: "<queue> <id> [--wait D] [--payload]", about: "a finished message's record: outcome, times, last error, result", onQueue: result,
		details: `Kept when the queue retains finished messages (Config.Retain) or the handler
gave the message a result (Message.SetResult).

  --wait D      wait up to D for it (blocks on its wake-up, no polling)
  --payload     show the result, quoted (hidden by default: it may hold personal data)`},
	"cancel":  {args: "<queue> <id>", about: "delete a waiting message, or stop one in flight, by id", onQueue: cancel},
	"run-now": {args: "<queue> <id>", about: "make a delayed message ready at once", onQueue: runNow},
	"dead": {args: "<queue> list [-n N] [--payload] | show <id> | requeue <id> | requeue-all | purge [--yes]",
		about: "the dead letters: list, show, requeue one or all, purge", onQueue: dead,
		details: `  list          the oldest N (-n, default 20), saying "N of M" when there are more
  show <id>     one, with its payload
  requeue <id>  back to its lane; requeue-all: every one
  purge         delete every one (asks first unless --yes)`},
	"pause":  {args: "<queue>", about: "stop consumers taking messages (producers go on)", onQueue: pauseResume("pause")},
	"resume": {args: "<queue>", about: "let consumers take messages again", onQueue: pauseResume("resume")},
	"purge": {args: "<queue> [--yes]", about: "delete every waiting message (asks first unless --yes)",
		onQueue: func(ctx context.Context, q *prioq.Queue, args []string, stdin io.Reader, stdout io.Writer) error {
			return purgeConfirmed(ctx, "purge", args, stdin, stdout,
				fmt.Sprintf("delete every waiting message of %q?", q.Name()), "messages", q.Purge)
		}},
	"web": {args: "[--addr host:port] [--read-only] [--payloads] [--host NAME]... [queue...]",
		about: "serve the web dashboard (every queue, as they come and go, by default)",
		details: `The dashboard of the queues named, or of every queue on the server (found
again as pages ask: queues created later appear). Without credentials it is
read-only and listens on loopback only; with them, every request must carry
them and actions are allowed (each confirmed with a count).

  --addr A          where to listen (default 127.0.0.1:8080); an address that
                    is not loopback is refused without credentials
  --token T         a bearer token ($PRIOQ_WEB_TOKEN): "Authorization: Bearer T",
                    or any user name with T as the password in a browser
  --basic-auth U:P  a user and password ($PRIOQ_WEB_BASIC_AUTH)
  --host NAME       a name the dashboard is served under (a DNS name, a proxy's),
                    repeatable: requests for any other Host are refused
  --read-only       no actions, even with credentials
  --payloads        show payloads (hidden by default)

Prefer the environment to the flags for secrets: a command line is visible
to every user of the machine. Secrets are never printed.`},
	"consumers": {args: "[queue] [--json]", about: "the live consumers (of one queue): host, process, queues, in flight",
		details: `Every consumer that runs now (its heartbeat is in the registry; one that
stopped leaves at once, one whose process died within three heartbeats,
15 s by default), or those serving queue. "no consumer serves Q" for a queue
with work means nobody works on it.

  --json        one JSON object per consumer`},
	"version": {args: "", about: "prioq's version and commit"},
	"help":    {args: "[command]", about: "the commands, or one command's flags"},
}

// order is the order commands are listed in.
var order = []string{"create", "queues", "stats", "peek", "show", "result", "enqueue", "cancel", "run-now", "dead", "pause", "resume", "purge",
	"limit", "rate", "schedules", "schedule", "consumers", "web", "version", "help"}

func usage() string {
	var b strings.Builder
	b.WriteString(`usage: prioq [--url URL] <command> [flags] [args]

The URL (or $PRIOQ_URL; default redis://127.0.0.1:6379):
redis://[user:password@]host:port[/db], rediss:// for TLS,
redis+sentinel://host:port[,host:port...]/master, redis+cluster://host:port[,host:port...].

commands:
`)
	for _, name := range order {
		fmt.Fprintf(&b, "  %-9s %s\n", name, commands[name].about)
	}
	b.WriteString("\nprioq <command> --help tells its arguments and flags.\n")
	return b.String()
}

func (c *command) help() string {
	for name, cc := range commands {
		if cc == c {
			s := fmt.Sprintf("usage: prioq [--url URL] %s %s\n\n%s.\n", name, c.args, strings.ToUpper(c.about[:1])+c.about[1:])
			if c.details != "" {
				s += "\n" + c.details + "\n"
			}
			return s
		}
	}
	return usage()
}

func help(args []string, w io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(w, usage())
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		return bad("unknown command %q (prioq help lists them)", args[0])
	}
	fmt.Fprint(w, c.help())
	return nil
}

// version says which prioq this is: its module's version ("(devel)" when
// built from a checkout), the commit it was built from (with "+dirty"
// when the checkout had changes), the library's version, and Go's.
func version(w io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return &exitError{1, "version: this binary carries no build information"}
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	fmt.Fprintf(w, "prioq %s (%s)\n", cmp.Or(bi.Main.Version, "(devel)"), bi.Main.Path)
	if rev := settings["vcs.revision"]; rev != "" {
		if settings["vcs.modified"] == "true" {
			rev += "+dirty"
		}
		fmt.Fprintf(w, "commit %s %s\n", rev, settings["vcs.time"])
	} else {
		fmt.Fprintln(w, "commit unknown (built without version control information)")
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/prioq/prioq" || d.Path == "github.com/prioq/prioq/dashboard" {
			v := d.Version
			if d.Replace != nil {
				v = cmp.Or(d.Replace.Version, "(devel)") + " from " + d.Replace.Path
			}
			fmt.Fprintf(w, "%s %s\n", d.Path, v)
		}
	}
	fmt.Fprintf(w, "%s %s/%s\n", bi.GoVersion, runtime.GOOS, runtime.GOARCH)
	return nil
}
