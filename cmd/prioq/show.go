package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/prioq/prioq"
)

// show prints one message found by id wherever it is (Queue.Message): its
// state and what the state says, its headers, and its payload with
// --payload.
func show(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
	fs := newFlags("show")
	payload := fs.Bool("payload", false, "")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	st, err := q.Message(ctx, pos[0])
	if errors.Is(err, prioq.ErrNotFound) {
		return &exitError{1, fmt.Sprintf("show: no message %q in %q (never enqueued, or finished with no record kept: acked, cancelled, purged)", pos[0], q.Name())}
	}
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	line("id", "%s", st.ID)
	line("state", "%s", st.State)
	if q.Shards() > 1 {
		line("shard", "%d", st.Shard)
	}
	line("priority", "%d", st.Priority)
	if st.Group != "" {
		line("group", "%s", st.Group)
	}
	line("attempts", "%d", st.Attempts)
	line("enqueued", "%s", at(st.EnqueuedAt))
	switch st.State {
	case prioq.MessageReady:
		where := "its lane"
		if st.Group != "" {
			where = "its group's list"
		}
		line("lane", "%d", st.Lane)
		line("place", "%d before it in %s", st.Ahead, where)
		if st.Parked {
			line("parked", "yes: its group is at its limit")
		}
	case prioq.MessageDelayed:
		line("due", "%s (in %s)", at(st.Due), time.Until(st.Due).Round(time.Second))
	case prioq.MessageInFlight:
		line("taken", "%s", at(st.TakenAt))
		line("lease ends", "%s", at(st.LeaseDeadline))
		line("lease token", "%s", st.LeaseToken)
		ws, werr := prioq.Workers(ctx, clientOf(ctx))
		line("held by", "%s", holderName(st.Holder, ws, werr == nil))
		if p := st.Progress; p != nil {
			line("progress", "%d%% %s (at %s)", p.Percent, strconv.Quote(p.Note), at(p.At))
		}
	case prioq.MessageDead:
		line("died", "%s", at(st.DiedAt))
		line("reason", "%s", strconv.Quote(st.Reason))
		if st.Raw != nil {
			line("damaged", "its record did not decode (%d bytes)", len(st.Raw))
		}
	case prioq.MessageFinished:
		showResult(line, at, *st.Finished, *payload)
		return tw.Flush() // its payload and headers are not kept
	}
	keys := make([]string, 0, len(st.Headers))
	for k := range st.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		line("header", "%s=%s", strconv.Quote(k), strconv.Quote(st.Headers[k]))
	}
	line("payload", "%s", showPayload(st.Payload, *payload))
	return tw.Flush()
}

// showResult prints a finished message's record; its result (which may
// hold personal data, as a payload) only with show.
func showResult(line func(k, format string, a ...any), at func(time.Time) string, r prioq.Result, show bool) {
	line("outcome", "%s", r.Outcome)
	line("finished", "%s", at(r.FinishedAt))
	if r.Error != "" {
		line("last error", "%s", strconv.Quote(r.Error))
	}
	if r.Value == nil {
		line("result", "none")
	} else {
		line("result", "%s", showPayload(r.Value, show))
	}
}

// result prints the record of a finished message (Queue.Result), waiting
// for it with --wait (Queue.WaitResult).
func result(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
	fs := newFlags("result")
	payload := fs.Bool("payload", false, "")
	wait := fs.Duration("wait", 0, "")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	var r prioq.Result
	if *wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, *wait)
		defer cancel()
		r, err = q.WaitResult(wctx, pos[0])
		if errors.Is(err, context.DeadlineExceeded) {
			return &exitError{1, fmt.Sprintf("result: no record of %q in %q within %s", pos[0], q.Name(), *wait)}
		}
	} else {
		r, err = q.Result(ctx, pos[0])
	}
	if errors.Is(err, prioq.ErrNotFound) {
		return &exitError{1, fmt.Sprintf("result: no record of %q in %q (not finished, or its queue keeps none: Config.Retain, Message.SetResult)", pos[0], q.Name())}
	}
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	line("id", "%s", r.ID)
	line("attempts", "%d", r.Attempts)
	line("enqueued", "%s", at(r.EnqueuedAt))
	showResult(line, at, r, *payload)
	return tw.Flush()
}
