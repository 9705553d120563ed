package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prioq/prioq"
)

// consumers lists the worker registry: every live consumer, or those that
// serve one queue.
func consumers(ctx context.Context, c redisClient, args []string, w io.Writer) error {
	fs := newFlags("consumers")
	asJSON := fs.Bool("json", false, "")
	pos, err := parse(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return bad("consumers: one queue at most")
	}
	ws, err := prioq.Workers(ctx, c)
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		ws = slices.DeleteFunc(ws, func(x prioq.Worker) bool { return !x.Serves(pos[0]) })
	}
	if *asJSON {
		enc := json.NewEncoder(w)
		for _, x := range ws {
			if err := enc.Encode(workerJSON(x)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(ws) == 0 {
		if len(pos) == 1 {
			fmt.Fprintf(w, "no consumer serves %q\n", pos[0])
		} else {
			fmt.Fprintln(w, "no consumers")
		}
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tkind\thost\tpid\tprocess\tqueues\tin flight\tconcurrency\tdelivered\tup\tseen")
	for _, x := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s ago\n", x.ID, x.Kind, x.Host, x.PID, x.Process,
			queuesCell(x), x.InFlight, x.Concurrency, x.Delivered,
			now.Sub(x.Started).Round(time.Second), max(now.Sub(x.LastSeen), 0).Round(100*time.Millisecond))
	}
	return tw.Flush()
}

// queuesCell names up to three queues, then counts the rest.
func queuesCell(x prioq.Worker) string {
	s := strings.Join(x.Queues[:min(3, len(x.Queues))], ",")
	if n := len(x.Queues); n > 3 {
		s += fmt.Sprintf(" and %d more", n-3)
	}
	if x.Pattern != "" {
		s += " (pattern " + x.Pattern + ")"
	}
	if s == "" {
		s = "-"
	}
	return s
}

type workerRow struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	Process     string    `json:"process"`
	Queues      []string  `json:"queues"`
	Pattern     string    `json:"pattern,omitempty"`
	Concurrency int       `json:"concurrency"`
	InFlight    int       `json:"in_flight"`
	Delivered   int64     `json:"delivered"`
	Started     time.Time `json:"started"`
	LastSeen    time.Time `json:"last_seen"`
	Expires     time.Time `json:"expires"`
}

func workerJSON(x prioq.Worker) workerRow {
	return workerRow{x.ID, x.Kind, x.Host, x.PID, x.Process, x.Queues, x.Pattern, x.Concurrency, x.InFlight,
		x.Delivered, x.Started, x.LastSeen, x.Expires}
}
