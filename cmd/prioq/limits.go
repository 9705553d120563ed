package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/prioq/prioq"
)

// limit sets a group's limits ('*': every group's).
func limit(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
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

// rate sets the queue's rate limit.
func rate(ctx context.Context, q *prioq.Queue, args []string, _ io.Reader, w io.Writer) error {
	if len(args) != 1 {
		return bad("usage: prioq rate <queue> <N/D | none>")
	}
	r, err := parseRate(args[0])
	if err != nil {
		return err
	}
	if err := q.SetRateLimit(ctx, r); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: rate limit %s\n", q.Name(), r)
	return nil
}

// parseRate reads a rate limit, "N/D" (100/1s: at most 100 taken in any
// second), or "none". A window below prioq.MinDuration is refused: no
// timer of the library works below it.
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
	if d < prioq.MinDuration {
		return prioq.Rate{}, bad("rate %q: its window %v is below %v, the shortest prioq times (100/1s is 1/10ms)", v, d, prioq.MinDuration)
	}
	return prioq.Rate{N: n, Per: d}, nil
}
