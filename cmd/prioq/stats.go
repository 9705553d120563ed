package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/prioq/prioq"
)

// clearScreen moves the cursor home and clears the screen (what watch(1)
// does between two readings).
const clearScreen = "\x1b[H\x1b[2J"

// oldestText is the age of the oldest ready message as stats and queues
// say it. prioq measures it at the heads of the lanes: messages that wait
// in a group held at its limit are not there, so Stats says 0s with
// messages ready; that is said to be unknown rather than 0s.
func oldestText(st prioq.Stats) string {
	if st.OldestReady == 0 && st.Ready > 0 {
		return "unknown (in groups)"
	}
	return st.OldestReady.Round(time.Millisecond).String()
}

// stats prints a queue's figures once, or with --watch every D until ctx
// is done: on a terminal each reading replaces the last, elsewhere (a pipe,
// a file) the readings follow each other, a blank line between two. With
// --watch a failed reading (Redis down) is printed as such and the next one
// tried D later: the client reconnects by itself.
func stats(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
	fs := newFlags("stats")
	asJSON := fs.Bool("json", false, "")
	watch := fs.Duration("watch", 0, "")
	topGroups := fs.Int("groups", 10, "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if *watch < 0 || (*watch > 0 && *watch < prioq.MinDuration) {
		return bad("stats: --watch %v: at least %v (0: once)", *watch, prioq.MinDuration)
	}
	redraw := *watch > 0 && !*asJSON && isTerminal(w)
	var prev prioq.Stats
	var prevAt time.Time
	for n := 0; ; n++ {
		var out bytes.Buffer
		if err := reading(ctx, q, *topGroups, &out, *asJSON, &prev, &prevAt); err != nil {
			if *watch == 0 {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			prevAt = time.Time{} // no rate across the gap
			out.Reset()
			now := time.Now()
			if *asJSON {
				b, _ := json.Marshal(map[string]any{"queue": q.Name(), "at": now.UTC().Format(time.RFC3339Nano), "error": message(err)})
				fmt.Fprintln(&out, string(b))
			} else {
				fmt.Fprintf(&out, "queue %s: cannot read it at %s: %s\nretrying every %v (Ctrl-C stops)\n",
					q.Name(), now.Format("15:04:05"), message(err), *watch)
			}
		}
		switch {
		case redraw:
			fmt.Fprint(w, clearScreen)
			fmt.Fprintf(&out, "\nas of %s, every %v (Ctrl-C stops)\n", time.Now().Format("15:04:05"), *watch)
		case n > 0 && !*asJSON:
			fmt.Fprintln(w)
		}
		if _, err := w.Write(out.Bytes()); err != nil {
			return err
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

// reading reads the queue's figures once and prints them into out, as
// JSON or as a table; the rates are over the time since *prevAt, which it
// moves on.
func reading(ctx context.Context, q *prioq.Queue, topGroups int, out io.Writer, asJSON bool, prev *prioq.Stats, prevAt *time.Time) error {
	st, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	var groups []prioq.GroupStats
	if st.Groups > 0 || st.InFlight > 0 {
		if groups, err = q.Groups(ctx, topGroups); err != nil {
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
	// With --watch, rates over the interval since the last reading: the
	// change of the queue's totals (prioq.Stats) over the time between.
	var enqRate, ackRate *float64
	if !prevAt.IsZero() && st.Enqueued >= prev.Enqueued && st.Acked >= prev.Acked {
		dt := now.Sub(*prevAt).Seconds()
		e, a := float64(st.Enqueued-prev.Enqueued)/dt, float64(st.Acked-prev.Acked)/dt
		enqRate, ackRate = &e, &a
	}
	*prev, *prevAt = st, now
	if asJSON {
		js := map[string]any{"queue": q.Name(), "layout": q.Layout().String(), "mode": q.Mode().String(),
			"lanes": st.Lanes, "ready": st.Ready, "delayed": st.Delayed, "in_flight": st.InFlight, "dead": st.Dead,
			"oldest_ready_seconds": st.OldestReady.Seconds(), "oldest_ready_known": st.OldestReady > 0 || st.Ready == 0,
			"paused": st.Paused, "enqueued_total": st.Enqueued, "acked_total": st.Acked, "groups": st.Groups, "groups_parked": st.GroupsParked,
			"retried_total": st.Retried, "dead_lettered_total": st.DeadLettered, "expired_total": st.Expired,
			"top_groups": groupsJSON(groups), "rate_limit": rate.String()}
		if enqRate != nil {
			js["enqueued_per_second"], js["acked_per_second"] = *enqRate, *ackRate
		}
		if len(st.Shards) > 0 {
			js["shards"] = shardsJSON(st)
		}
		b, _ := json.Marshal(js)
		fmt.Fprintln(out, string(b))
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "queue\t%s (%s, %s)\n", q.Name(), q.Layout(), q.Mode())
	var inLanes int64
	for i := len(st.Lanes) - 1; i >= 0; i-- {
		fmt.Fprintf(tw, "lane %d\t%d\n", i, st.Lanes[i])
		inLanes += st.Lanes[i]
	}
	fmt.Fprintf(tw, "ready\t%d\ndelayed\t%d\nin flight\t%d\ndead\t%d\noldest ready\t%s\npaused\t%v\n",
		st.Ready, st.Delayed, st.InFlight, st.Dead, oldestText(st), st.Paused)
	fmt.Fprintf(tw, "enqueued (total)\t%d\nacked (total)\t%d\n", st.Enqueued, st.Acked)
	if q.Mode() == prioq.AtLeastOnce {
		fmt.Fprintf(tw, "retried (total)\t%d\ndead-lettered (total)\t%d\nleases expired (total)\t%d\n",
			st.Retried, st.DeadLettered, st.Expired)
	}
	if enqRate != nil {
		fmt.Fprintf(tw, "enqueued/s\t%.1f\nacked/s\t%.1f\n", *enqRate, *ackRate)
	}
	fmt.Fprintf(tw, "rate limit\t%s\ngroups\t%d with messages ready, %d of them waiting at a limit\n", rate, st.Groups, st.GroupsParked)
	tw.Flush()
	if outside := st.Ready - inLanes; outside > 0 {
		fmt.Fprintf(out, "(%d ready message(s) wait in groups, not in the lanes: a group has one entry in its lane, none while at its limit)\n", outside)
	}
	if len(groups) > 0 {
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "group\tready\tin flight\tlimit\trate\tat limit")
		for _, g := range groups {
			at := fmt.Sprint(g.Parked)
			if g.RateParked {
				at = "rate"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", g.Group, g.Ready, g.InFlight, g.Limit, g.Rate, at)
		}
		tw.Flush()
		if len(groups) == topGroups {
			fmt.Fprintf(out, "(the %d most loaded groups; %d have messages ready; --groups N shows more)\n", len(groups), st.Groups)
		}
	}
	if len(st.Shards) > 0 {
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "shard\tslot\tnode\tready\tdelayed\tin flight\tdead")
		for i, s := range st.Shards {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%d\n", i, s.Slot, cmp.Or(s.Node, "-"), s.Ready, s.Delayed, s.InFlight, s.Dead)
		}
		tw.Flush()
	}
	return nil
}

// shardsJSON is what stats --json says of each shard of a queue of several.
func shardsJSON(st prioq.Stats) []map[string]any {
	var out []map[string]any
	for i, s := range st.Shards {
		out = append(out, map[string]any{"shard": i, "slot": s.Slot, "node": s.Node, "ready": s.Ready, "delayed": s.Delayed, "in_flight": s.InFlight, "dead": s.Dead})
	}
	return out
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
