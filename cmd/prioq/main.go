// Command prioq operates prioq queues from a shell: list them, read their
// state, peek, enqueue, cancel, handle dead letters, pause, resume and purge,
// and serve the web dashboard.
//
//	prioq [--url URL] <command> [flags] [args]
//
// The URL (or $PRIOQ_URL; default redis://127.0.0.1:6379) is
// redis://[user:password@]host:port[/db], rediss:// for TLS,
// redis+sentinel://host:port[,host:port...]/master, or
// redis+cluster://host:port[,host:port...]. `prioq help` lists the
// commands, `prioq <command> --help` tells one; neither needs Redis.
//
// Exit codes: 0 done; 1 the operation failed (a Redis error, an id not
// found); 2 bad input: a usage error, an unknown queue, a priority outside
// the queue's layout, Redis unreachable, an address the dashboard cannot
// listen on. Errors are one line on stderr, prefixed "prioq: " once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prioq/prioq"
)

// exitError carries an exit code with its one-line message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func bad(format string, a ...any) error { return &exitError{2, fmt.Sprintf(format, a...)} }

func main() {
	// Ctrl-C or SIGTERM ends a --watch or the dashboard cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout)
	stop()
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
	fmt.Fprintln(os.Stderr, message(err))
	os.Exit(code)
}

// message is err as one line prefixed "prioq: " once: prioq's errors
// carry the prefix at each level they are wrapped ("prioq: enqueue "q":
// prioq: invalid priority").
func message(err error) string {
	msg := strings.ReplaceAll(err.Error(), "prioq: ", "")
	return "prioq: " + strings.ReplaceAll(msg, "\n", "; ")
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
	showVersion := global.Bool("version", false, "")
	err := global.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage())
		return nil
	case err != nil:
		return bad("%v (prioq --help)", err)
	case *showVersion:
		return version(stdout)
	case global.NArg() == 0:
		return bad("usage: prioq [--url URL] <command> [flags] [args] (prioq help lists the commands)")
	}
	name, rest := global.Arg(0), global.Args()[1:]
	cmd, ok := commands[name]
	if !ok {
		return bad("unknown command %q (prioq help lists them)", name)
	}
	// Help, and what needs no Redis, before connecting.
	if wantsHelp(rest) {
		fmt.Fprint(stdout, cmd.help())
		return nil
	}
	switch name {
	case "help":
		return help(rest, stdout)
	case "version":
		return version(stdout)
	}
	client, err := connect(ctx, *rawURL)
	if err != nil {
		return err
	}
	defer client.Close()
	switch name {
	case "queues":
		return listQueues(ctx, client, rest, stdout)
	case "create":
		return create(ctx, client, rest, stdout)
	case "consumers":
		return consumers(ctx, client, rest, stdout)
	case "web":
		return web(ctx, client, rest, stdout)
	}
	// "schedule add|rm <queue> ..." reads as "schedule <queue> add|rm ...".
	if name == "schedule" && len(rest) > 1 && (rest[0] == "add" || rest[0] == "rm") {
		rest = append([]string{rest[1], rest[0]}, rest[2:]...)
	}
	if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
		return bad("%s needs a queue name (prioq %s --help)", name, name)
	}
	q, err := prioq.OpenExisting(ctx, client, rest[0], prioq.Config{AllowEviction: true, Logger: quietLogger()})
	if errors.Is(err, prioq.ErrNotFound) {
		return bad("no queue %q", rest[0])
	}
	if err != nil {
		return err
	}
	return cmd.onQueue(context.WithValue(ctx, clientKey{}, client), q, rest[1:], stdin, stdout)
}

// clientKey carries the command's client in its ctx, for a queue's command
// that reads beyond its queue (the worker registry).
type clientKey struct{}

func clientOf(ctx context.Context) redisClient {
	c, _ := ctx.Value(clientKey{}).(redisClient)
	return c
}

// wantsHelp reports whether args ask for help: -h, -help or --help before
// any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// quietLogger keeps prioq's own log lines to warnings and worse, on stderr.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
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
			return nil, bad("%s: %v (prioq %s --help)", fs.Name(), err, strings.Fields(fs.Name())[0])
		}
		args = fs.Args()
		if len(args) > 0 {
			pos = append(pos, args[0])
			args = args[1:]
		}
	}
	if want >= 0 && len(pos) != want {
		return nil, bad("%s: want %d argument(s), got %d (prioq %s --help)", fs.Name(), want, len(pos), strings.Fields(fs.Name())[0])
	}
	return pos, nil
}
