package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/prioq/prioq"
)

// schedulesList prints the queue's schedules.
func schedulesList(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
	fs := newFlags("schedules")
	payload := fs.Bool("payload", false, "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	list, err := q.Schedules(ctx)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		fmt.Fprintf(w, "%s: no schedule\n", q.Name())
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tspec\tnext\tlast fired\tpriority\tmissed\tpayload")
	for _, s := range list {
		next := when(s.Next)
		if s.Err != nil {
			next = "off: " + message(s.Err)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.Name, s.Spec, next, when(s.LastFired), s.Priority, s.Missed,
			showPayload(s.Payload, *payload))
	}
	return tw.Flush()
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// schedule adds (or replaces) or removes a schedule.
func schedule(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
	if len(args) == 0 {
		return bad("usage: prioq schedule add <queue> <name> <spec> <payload> | rm <queue> <name> (prioq schedule --help)")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "add":
		fs := newFlags("schedule add")
		prio := fs.Int64("priority", 0, "")
		group := fs.String("group", "", "")
		missed := fs.String("missed", "once", "")
		headers := headerFlags{}
		fs.Var(headers, "header", "")
		pos, err := parse(fs, args, 3)
		if err != nil {
			return err
		}
		policy, ok := map[string]prioq.MissedPolicy{"once": prioq.MissedOnce, "skip": prioq.MissedSkip, "all": prioq.MissedAll}[*missed]
		if !ok {
			return bad("schedule add: --missed %q is not once, skip or all", *missed)
		}
		opts := []prioq.Option{prioq.Headers(headers), prioq.Missed(policy)}
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "priority":
				opts = append(opts, prioq.Priority(*prio))
			case "group":
				opts = append(opts, prioq.Group(*group))
			}
		})
		next, err := q.Schedule(ctx, pos[0], pos[1], []byte(pos[2]), opts...)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: schedule %s set, next fire %s\n", q.Name(), pos[0], when(next))
		return nil
	case "rm":
		pos, err := parse(newFlags("schedule rm"), args, 1)
		if err != nil {
			return err
		}
		if err := q.Unschedule(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: schedule %s removed\n", q.Name(), pos[0])
		return nil
	}
	return bad("schedule: unknown subcommand %q: add or rm (prioq schedule --help)", sub)
}
