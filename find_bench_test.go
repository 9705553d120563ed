package prioq

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// BenchmarkMessageDeep looks for an id that no message has (the whole
// search: every ready message read) in a queue of 100,000 ready messages
// of 100 bytes over 3 lanes, and, interleaved in the same rounds, the
// reference: a Cancel of that id, which reads the same lanes in one
// cancel.lua call. It reports the medians of the wall time of each, of the
// Redis server time of each (INFO commandstats, evalsha), and of the
// server time of one find.lua call: how long the search blocks Redis at
// once, against the Cancel's one call.
//
//	go test -run XXX -bench MessageDeep -benchtime 10x .
func BenchmarkMessageDeep(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	q := openQueue(b, c, Config{Layout: Levels(3)})
	defer q.Purge(ctx)
	const depth = 100_000
	payload := []byte(strings.Repeat("p", 100))
	for i := 0; i < depth; i += MaxBatch {
		items := make([]EnqueueItem, MaxBatch)
		for j := range items {
			items[j] = EnqueueItem{Payload: payload, Options: []Option{Priority(int64((i + j) % 3))}}
		}
		if _, err := q.EnqueueBatch(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	evalsha := func() (usec, calls float64) {
		var info string
		if err := c.Do(ctx, radix.Cmd(&info, "INFO", "commandstats")); err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "usec="); ok {
						usec, _ = strconv.ParseFloat(v, 64)
					}
					if v, ok := strings.CutPrefix(f, "calls="); ok {
						calls, _ = strconv.ParseFloat(v, 64)
					}
				}
			}
		}
		return usec, calls
	}
	var findWall, findServer, findPerCall, cancelWall, cancelServer []float64
	for i := 0; i < b.N; i++ {
		u0, n0 := evalsha()
		start := time.Now()
		if _, err := q.Message(ctx, "missing"); !errors.Is(err, ErrNotFound) {
			b.Fatal(err)
		}
		findWall = append(findWall, float64(time.Since(start).Microseconds()))
		u1, n1 := evalsha()
		findServer = append(findServer, u1-u0)
		findPerCall = append(findPerCall, (u1-u0)/(n1-n0)) // every find.lua call, and no other script
		start = time.Now()
		if err := q.Cancel(ctx, "missing"); !errors.Is(err, ErrNotFound) {
			b.Fatal(err)
		}
		cancelWall = append(cancelWall, float64(time.Since(start).Microseconds()))
		u2, _ := evalsha()
		cancelServer = append(cancelServer, u2-u1)
	}
	med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	mf, mc := med(findServer), med(cancelServer)
	b.ReportMetric(med(findWall)/1000, "message-ms")
	b.ReportMetric(med(cancelWall)/1000, "cancel-ms")
	b.ReportMetric(mf/1000, "message-server-ms")
	b.ReportMetric(mc/1000, "cancel-server-ms")
	b.ReportMetric(med(findPerCall), "message-µs/call")
	b.ReportMetric(med(findPerCall)/mc, "call/cancel")
}
