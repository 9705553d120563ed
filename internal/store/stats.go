package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// Stats are a shard's figures (see the root's Stats for each field).
type Stats struct {
	Lanes       []int64
	Ready       int64
	Groups      int64
	Parked      int64
	Delayed     int64
	InFlight    int64
	Dead        int64
	OldestReady time.Duration
	Paused      bool
	Enqueued    int64
	Acked       int64
	Retried     int64
	DeadLetters int64
	Expired     int64
	Cancelled   int64
}

// The failure totals of a queue's counts hash (keys.go), beside enqueued
// and acked: written by Go after the call they count (a failure, a sweep),
// not inside it, so a process that dies between the two, or a Redis at
// maxmemory, leaves one uncounted: totals for rates, not accounts.
const (
	countRetried = "retried"       // deliveries failed and scheduled again (Retry, Run's errors)
	countDead    = "dead_lettered" // messages moved to the dead letters, by a failure or the sweep
	countExpired = "expired"       // leases that ended unacked, their messages delivered again (the sweep)
)

// countFailures adds to the failure totals; a refusal is dropped (see above).
func (s *Shard) countFailures(ctx context.Context, field string, n int) {
	if n > 0 {
		_ = s.do(ctx, radix.Cmd(nil, "HINCRBY", s.k.counts, field, strconv.Itoa(n)))
	}
}

// Stats is a snapshot of one shard: the root's Stats, without its
// per-shard part. Read in one pipelined round trip (two for a Range queue of
// format 4: its depth is counted by a script), not atomically.
func (s *Shard) Stats(ctx context.Context) (Stats, error) { return s.stats(ctx) }

func (s *Shard) stats(ctx context.Context) (Stats, error) {
	n := len(s.k.lanes)
	var st Stats
	var heads [][][]byte // first entry of each lane
	var paused int64
	var now []string    // the server's TIME: seconds, microseconds
	var counts []string // missing fields read as ""
	var groups map[string]string
	err := s.doPipeline(ctx, func() *radix.Pipeline {
		st, heads, paused, now, counts, groups = Stats{Lanes: make([]int64, n)}, make([][][]byte, n), 0, nil, nil, nil
		p := radix.NewPipeline()
		for i, key := range s.k.lanes {
			if s.lists() {
				break // depth.lua, below
			}
			if s.isRange() {
				p.Append(radix.Cmd(&st.Lanes[i], "ZCARD", key))
				p.Append(radix.Cmd(&heads[i], "ZRANGE", key, "0", "0"))
			} else {
				p.Append(radix.Cmd(&st.Lanes[i], "LLEN", key))
				p.Append(radix.Cmd(&heads[i], "LRANGE", key, "0", "0"))
			}
		}
		p.Append(radix.Cmd(&st.Delayed, "ZCARD", s.k.delayed))
		p.Append(radix.Cmd(&st.InFlight, "ZCARD", s.k.leases))
		p.Append(radix.Cmd(&st.Dead, "LLEN", s.k.dead))
		p.Append(radix.Cmd(&paused, "EXISTS", s.k.paused))
		p.Append(radix.Cmd(&now, "TIME"))
		p.Append(radix.Cmd(&counts, "HMGET", s.k.counts, countEnqueued, countAcked, countRetried, countDead, countExpired, countCancelled))
		p.Append(radix.Cmd(&groups, "HGETALL", s.k.gready))
		return p
	})
	if err != nil {
		return Stats{}, fmt.Errorf("prioq: stats %q: %w", s.name, err)
	}
	var headPrios []string // lists(): the priority whose list each head is in
	if s.lists() {
		if heads, headPrios, err = s.listsDepth(ctx, st.Lanes); err != nil {
			return Stats{}, fmt.Errorf("prioq: stats %q: %w", s.name, err)
		}
	}
	st.Paused = paused == 1
	if len(counts) == 6 {
		for i, to := range []*int64{&st.Enqueued, &st.Acked, &st.Retried, &st.DeadLetters, &st.Expired, &st.Cancelled} {
			*to, _ = strconv.ParseInt(counts[i], 10, 64)
		}
	}
	// Groups: their messages for their markers (gready's "" counts those).
	for g, v := range groups {
		c, _ := strconv.ParseInt(v, 10, 64)
		if g == "" {
			st.Ready -= c
		} else if c > 0 {
			st.Ready += c
			st.Groups++
		}
	}
	oldest := int64(-1)
	for i, c := range st.Lanes {
		st.Ready += c
		if len(heads[i]) == 0 {
			continue
		}
		if e, err := s.decodeLaneEntry(heads[i][0]); err == nil && (oldest < 0 || e.EnqueuedMs < oldest) {
			oldest = e.EnqueuedMs
		}
	}
	// Messages that wait in groups: the lane's head may be a group's
	// marker, and a group at its limit has none in any lane (parked): their
	// oldest are at the heads of the groups' lists. Two round trips more,
	// for a queue with groups only.
	if st.Groups > 0 {
		var parked map[string]string
		if err := s.tolerant(ctx, func() radix.Action { return radix.Cmd(&parked, "HGETALL", s.k.gpark) }); err != nil {
			return Stats{}, fmt.Errorf("prioq: stats %q: %w", s.name, err)
		}
		st.Parked = int64(len(parked))
		if lists := s.groupHeadLists(heads, headPrios, parked); len(lists) > 0 {
			e, err := s.oldestOf(ctx, lists)
			if err != nil {
				return Stats{}, fmt.Errorf("prioq: stats %q: %w", s.name, err)
			}
			if e >= 0 && (oldest < 0 || e < oldest) {
				oldest = e
			}
		}
	}
	if now := serverMs(now); oldest >= 0 && now > oldest {
		st.OldestReady = time.Duration(now-oldest) * time.Millisecond
	}
	return st, nil
}

// statsNames is how many priorities' lists of a Range queue (format 4)
// Stats counts one by one, in all its segments: beyond, it estimates
// (depth.lua), so that a Stats costs Redis about a millisecond at most.
const statsNames = 1000

// StatsNames is statsNames: how many lists a Stats counts one by one.
const StatsNames = statsNames

// listsDepth fills lanes with the messages waiting in each segment of a
// Range queue of format 4, and returns each one's first entry, as the
// pipeline of stats reads them for the other layouts.
func (s *Shard) listsDepth(ctx context.Context, lanes []int64) ([][][]byte, []string, error) {
	var rows [][][]byte
	if err := s.do(ctx, s.eval(depthScript, &rows, s.k.lanes, strconv.Itoa(statsNames))); err != nil {
		return nil, nil, err
	}
	if len(rows) != len(lanes) {
		return nil, nil, fmt.Errorf("%w: depth reply of %d rows for %d lanes", ErrScript, len(rows), len(lanes))
	}
	heads, prios := make([][][]byte, len(lanes)), make([]string, len(lanes))
	for i, r := range rows {
		if len(r) < 4 {
			return nil, nil, fmt.Errorf("%w: depth reply row %q", ErrScript, r)
		}
		lanes[i], _ = strconv.ParseInt(string(r[0]), 10, 64)
		if len(r[1]) > 0 {
			heads[i] = [][]byte{r[1]}
		}
		prios[i] = string(r[3])
	}
	return heads, prios, nil
}

// serverMs reads a TIME reply as unix milliseconds (0 if malformed).
func serverMs(t []string) int64 {
	if len(t) != 2 {
		return 0
	}
	sec, err1 := strconv.ParseInt(t[0], 10, 64)
	us, err2 := strconv.ParseInt(t[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return sec*1000 + us/1000
}

// groupHeads bounds how many groups' lists a Stats reads the first message
// of (one round trip): past it, OldestReady is the oldest of those read.
const groupHeads = 256

// groupHeadLists names the group lists whose first messages may be the
// oldest ready: the group of each lane whose head is a group's marker (a
// level's list; for a Range queue of format 4 the list of the priority
// that heads the segment, prios), and every parked group's list of each
// marker it parked ("N|score ..."; one that does not parse is passed
// over), groupHeads at most.
func (s *Shard) groupHeadLists(heads [][][]byte, prios []string, parked map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(k string) {
		if !seen[k] && len(out) < groupHeads {
			seen[k] = true
			out = append(out, k)
		}
	}
	for i, h := range heads {
		if len(h) == 0 || len(h[0]) < 2 || h[0][0] != groupMark {
			continue
		}
		switch {
		case s.lists():
			if p, err := strconv.ParseInt(prios[i], 10, 64); err == nil {
				add(s.k.prioList(p) + groupListTag + string(h[0][1:]))
			}
		case !s.isRange():
			add(s.k.lanes[i] + groupListTag + string(h[0][1:]))
		}
	}
	for g, v := range parked {
		for _, entry := range strings.Fields(v) {
			ns, score, ok := strings.Cut(entry, "|")
			lane, err := strconv.Atoi(ns)
			if !ok || err != nil || lane < 0 || lane >= len(s.k.lanes) {
				continue
			}
			switch {
			case s.lists():
				sc, err := strconv.ParseInt(score, 10, 64)
				if err != nil {
					continue
				}
				add(s.k.prioList(-sc) + groupListTag + g)
			case !s.isRange() && score == "":
				add(s.k.lanes[lane] + groupListTag + g)
			}
		}
	}
	return out
}

// oldestOf is the earliest enqueue time (ms) among the first messages of
// lists, -1 when none holds one that decodes. One round trip.
func (s *Shard) oldestOf(ctx context.Context, lists []string) (int64, error) {
	var firsts [][]byte
	err := s.tolerant(ctx, func() radix.Action {
		firsts = make([][]byte, len(lists))
		p := radix.NewPipeline()
		for i, k := range lists {
			p.Append(radix.Cmd(&firsts[i], "LINDEX", k, "0"))
		}
		return p
	})
	if err != nil {
		return -1, err
	}
	oldest := int64(-1)
	for _, b := range firsts {
		if e, err := DecodeEnvelope(b); err == nil && (oldest < 0 || e.EnqueuedMs < oldest) {
			oldest = e.EnqueuedMs
		}
	}
	return oldest, nil
}

// tolerant runs the action build makes (a read; again for a redirect), and returns its error unless it is an error reply
// of Redis (a key of the wrong type, a hand edit: it holds nothing to
// count). In a pipeline the other commands' receivers are filled still.
func (s *Shard) tolerant(ctx context.Context, build func() radix.Action) error {
	err := retryRedirects(ctx, func(ctx context.Context) error { return s.do(ctx, build()) })
	if err != nil && (!isReply(err) || isRedirect(err)) {
		return err
	}
	return nil
}
