package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prioq/prioq"
)

func showPayload(b []byte, show bool) string {
	if !show {
		return fmt.Sprintf("(%d bytes)", len(b))
	}
	return strconv.Quote(string(b))
}

func peek(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
	fs := newFlags("peek")
	n := fs.Int("n", 10, "")
	payload := fs.Bool("payload", false, "")
	state := fs.String("state", "ready", "")
	from := fs.Int("from", 0, "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if *n < 1 || *from < 0 {
		return bad("peek: -n %d --from %d: -n at least 1, --from at least 0", *n, *from)
	}
	switch *state {
	case "ready":
		if *from != 0 {
			return bad("peek: --from needs --state delayed or in-flight (ready messages are shown from the next one)")
		}
	case "delayed", "in-flight":
		return peekState(ctx, q, *state, *from, *n, *payload, w)
	default:
		return bad("peek: --state %q: ready, delayed or in-flight", *state)
	}
	st, err := q.Stats(ctx)
	if err != nil {
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
	if err := tw.Flush(); err != nil {
		return err
	}
	if int64(len(msgs)) < st.Ready {
		more := ""
		if len(msgs) == *n {
			more = " (-n shows more)"
		}
		fmt.Fprintf(w, "%d of %d ready%s\n", len(msgs), st.Ready, more)
	}
	return nil
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

func cancel(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
	if len(args) != 1 {
		return bad("usage: prioq cancel <queue> <id>")
	}
	if err := q.Cancel(ctx, args[0]); err != nil {
		return err
	}
	fmt.Fprintf(w, "cancelled %s\n", args[0])
	return nil
}

func runNow(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
	if len(args) != 1 {
		return bad("usage: prioq run-now <queue> <id>")
	}
	if err := q.RunNow(ctx, args[0]); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s is ready now\n", args[0])
	return nil
}

func pauseResume(cmd string) func(context.Context, *prioq.Queue, []string, io.Reader, io.Writer) error {
	return func(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
		if len(args) != 0 {
			return bad("usage: prioq %s <queue>", cmd)
		}
		f := q.Pause
		if cmd == "resume" {
			f = q.Resume
		}
		if err := f(ctx); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %sd\n", q.Name(), cmd)
		return nil
	}
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

func dead(ctx context.Context, q *prioq.Queue, args []string, stdin io.Reader, w io.Writer) error {
	if len(args) == 0 {
		return bad("usage: prioq dead <queue> list|show|requeue|requeue-all|purge (prioq dead --help)")
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
			st, err := q.Stats(ctx)
			if err != nil {
				return err
			}
			letters, err := q.DeadLetters(ctx, 0, limit)
			if err != nil {
				return err
			}
			for _, d := range letters {
				row(d)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if int64(len(letters)) < st.Dead {
				fmt.Fprintf(w, "%d of %d dead letters, oldest first (-n %d shows them all)\n", len(letters), st.Dead, st.Dead)
			}
			return nil
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
	return bad("unknown dead command %q (prioq dead --help)", sub)
}

// holderName says who holds a message in flight: "host:pid" of the live
// consumer whose process the holder id names, "unregistered:<id>" when the
// registry was read (known) and none does (its process died or closed, or
// runs without a heartbeat), the id alone when it was not, "-" for none.
func holderName(holder string, ws []prioq.Worker, known bool) string {
	if holder == "" {
		return "-"
	}
	if w, ok := prioq.HolderIn(ws, holder); ok {
		return fmt.Sprintf("%s:%d", w.Host, w.PID)
	}
	if known {
		return "unregistered:" + holder
	}
	return holder
}

// peekState lists a page of the delayed messages (soonest due first) or of
// those in flight (soonest lease deadline first), and how many there are.
func peekState(ctx context.Context, q *prioq.Queue, state string, from, n int, payload bool, w io.Writer) error {
	st, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var shown int
	total := st.Delayed
	if state == "delayed" {
		msgs, err := q.Scheduled(ctx, from, n)
		if err != nil {
			return err
		}
		shown = len(msgs)
		fmt.Fprintln(tw, "id\tpriority\tattempts\tdue\tenqueued\tpayload")
		for _, m := range msgs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", m.ID, m.Priority, m.Attempts, m.Due.UTC().Format(time.RFC3339),
				m.EnqueuedAt.UTC().Format(time.RFC3339), showPayload(m.Payload, payload))
		}
	} else {
		total = st.InFlight
		msgs, err := q.Leased(ctx, from, n)
		if err != nil {
			return err
		}
		shown = len(msgs)
		// The holder by host and process id when a live consumer of the
		// registry names it; a registry that cannot be read leaves the ids.
		ws, werr := prioq.Workers(ctx, clientOf(ctx)) // every process: a holder's consumers may serve other queues
		fmt.Fprintln(tw, "id\tpriority\tattempts\ttaken\tlease ends\tholder\tpayload")
		for _, m := range msgs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", m.ID, m.Priority, m.Attempts, m.TakenAt.UTC().Format(time.RFC3339),
				m.LeaseDeadline.UTC().Format(time.RFC3339), holderName(m.Holder, ws, werr == nil), showPayload(m.Payload, payload))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if shown < int(total) {
		fmt.Fprintf(w, "%d-%d of %d %s (--from and -n page)\n", min(from+1, from+shown), from+shown, total, state)
	}
	return nil
}
