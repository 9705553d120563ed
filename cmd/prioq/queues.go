package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prioq/prioq"
	"github.com/prioq/prioq/internal/fanout"
)

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
		return err
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
		return &exitError{2, err.Error()}
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
	Name        string   `json:"queue"`
	Layout      string   `json:"layout"`
	Mode        string   `json:"mode"`
	Shards      int      `json:"shards"`
	Ready       int64    `json:"ready"`
	Delayed     int64    `json:"delayed"`
	InFlight    int64    `json:"in_flight"`
	Dead        int64    `json:"dead"`
	OldestReady float64  `json:"oldest_ready_seconds"`
	OldestKnown bool     `json:"oldest_ready_known"`
	Paused      bool     `json:"paused"`
	EnqRate     *float64 `json:"enqueued_per_second,omitempty"`
	AckRate     *float64 `json:"acked_per_second,omitempty"`
	oldest      string
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
	noRates := fs.Bool("no-rates", false, "")
	limit := fs.Int("n", 0, "")
	asJSON := fs.Bool("json", false, "")
	pos, err := parse(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return bad("queues: one pattern at most (quote it: 'orders-*')")
	}
	if *window < prioq.MinDuration {
		return bad("queues: --window %v: rates are measured over it, so it must be at least %v (--no-rates lists without them)",
			*window, prioq.MinDuration)
	}
	if *limit < 0 {
		return bad("queues: -n %d: a count, 0 for all", *limit)
	}
	less := map[string]func(a, b queueRow) int{
		"name":   func(a, b queueRow) int { return strings.Compare(a.Name, b.Name) },
		"ready":  func(a, b queueRow) int { return cmp.Compare(b.Ready, a.Ready) },
		"oldest": func(a, b queueRow) int { return cmp.Compare(b.OldestReady, a.OldestReady) },
		"rate":   func(a, b queueRow) int { return cmp.Compare(ptr(b.EnqRate), ptr(a.EnqRate)) },
	}[*sortBy]
	if less == nil {
		return bad("queues: --sort %q: name, ready, oldest or rate", *sortBy)
	}
	if *sortBy == "rate" && *noRates {
		return bad("queues: --sort rate needs the rates (not --no-rates)")
	}
	pattern := ""
	if len(pos) == 1 {
		pattern = pos[0]
	}
	names, err := queueNames(ctx, c, pattern)
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
	if !*noRates {
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
		st := first[i]
		if !*noRates {
			var err error
			if st, err = qs[i].Stats(ctx); err != nil {
				rows[i].err = err
				return
			}
		}
		q := qs[i]
		rows[i] = queueRow{Name: q.Name(), Layout: q.Layout().String(), Mode: q.Mode().String(), Shards: q.Shards(),
			Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight, Dead: st.Dead,
			OldestReady: st.OldestReady.Seconds(), OldestKnown: st.OldestReady > 0 || st.Ready == 0, oldest: oldestText(st), Paused: st.Paused}
		if !*noRates {
			dt := time.Since(start).Seconds()
			e, a := float64(st.Enqueued-first[i].Enqueued)/dt, float64(st.Acked-first[i].Acked)/dt
			rows[i].EnqRate, rows[i].AckRate = &e, &a
		}
	})
	slices.SortStableFunc(rows, func(a, b queueRow) int {
		return cmp.Or(less(a, b), strings.Compare(a.Name, b.Name))
	})
	total := len(rows)
	if *limit > 0 && total > *limit {
		rows = rows[:*limit]
	}
	cut := func(out io.Writer) {
		if len(rows) < total {
			fmt.Fprintf(out, "%d of %d queues (-n 0 shows all)\n", len(rows), total)
		}
	}
	if *asJSON {
		for _, r := range rows {
			if r.err != nil {
				b, _ := json.Marshal(map[string]string{"queue": r.Name, "error": message(r.err)})
				fmt.Fprintln(w, string(b))
				continue
			}
			b, _ := json.Marshal(r)
			fmt.Fprintln(w, string(b))
		}
		cut(os.Stderr) // stdout stays one JSON object a line
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "queue\tready\tdelayed\tin flight\tdead\toldest ready\tenqueued/s\tacked/s\tpaused")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\terror: %s\n", r.Name, message(r.err))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%v\n", r.Name, r.Ready, r.Delayed, r.InFlight, r.Dead,
			r.oldest, rateText(r.EnqRate), rateText(r.AckRate), r.Paused)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	cut(w)
	return nil
}

func ptr(f *float64) float64 {
	if f == nil {
		return -1
	}
	return *f
}

func rateText(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *f)
}
