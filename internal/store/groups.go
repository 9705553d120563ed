package store

import (
	"cmp"
	"context"
	"slices"
	"strconv"

	"github.com/mediocregopher/radix/v4"
)

// groups.go: the Redis half of groups (the root's groups.go says what they
// are): a group key's rules, a group's limits, and every group's figures.

// SetGroupLimit stores the limits of group ("" for every group without its
// own: see the root's SetGroupLimit), concurrency 0 and the zero Rate for
// none, puts the groups waiting at a limit back in their lanes and wakes a
// consumer (grouplimit.lua). One round trip.
func (s *Shard) SetGroupLimit(ctx context.Context, group string, concurrency int, r Rate) error {
	return s.do(ctx, s.eval(groupLimitScript, nil, []string{s.k.glimits, s.k.gpark, s.k.wake, s.k.lanes[0]},
		s.kind(), group, fmtLimit(concurrency, r), strconv.Itoa(len(s.k.lanes))))
}

// GroupCounts are one shard's raw figures of its groups (GroupCounts).
type GroupCounts struct {
	ready, park, limits map[string]string
	due                 []string // gdue: group, time, ...
	inflight            []string // group, count, ...
}

// GroupCounts reads the shard's figures of its groups: every group's ready
// count, parks, limits and rate parks (a pipeline), and the lease tokens of
// the groups that may have messages in flight (groupinflight.lua). Two
// round trips.
func (s *Shard) GroupCounts(ctx context.Context) (GroupCounts, error) {
	var c GroupCounts
	err := s.doPipeline(ctx, func() *radix.Pipeline {
		c = GroupCounts{}
		p := radix.NewPipeline()
		p.Append(radix.Cmd(&c.ready, "HGETALL", s.k.gready))
		p.Append(radix.Cmd(&c.park, "HGETALL", s.k.gpark))
		p.Append(radix.Cmd(&c.limits, "HGETALL", s.k.glimits))
		p.Append(radix.Cmd(&c.due, "ZRANGE", s.k.gdue, "0", "-1", "WITHSCORES"))
		return p
	})
	if err == nil {
		// (A script, so not in the pipeline: radix sends EVALSHA and
		// falls back to EVAL, which a pipeline cannot.)
		err = s.do(ctx, s.eval(groupInflightScript, &c.inflight, []string{s.k.leases, s.k.gflight, s.k.gpark, s.k.lanes[0]}))
	}
	return c, err
}

// GroupStats are one group's figures: the root's GroupStats.
type GroupStats struct {
	Group              string
	Ready, InFlight    int64
	Parked, RateParked bool
	Limit              int
	Rate               Rate
}

// MergeGroups makes the figures of the groups with messages waiting or in
// flight out of every shard's counts (per, shard 0 first), the most loaded
// first (Ready + InFlight, then name), at most n (n <= 0: all). A group
// lives in one shard, so its figures come from that one.
func MergeGroups(per []GroupCounts, n int) []GroupStats {
	byName := map[string]*GroupStats{}
	get := func(g string) *GroupStats {
		st := byName[g]
		if st == nil {
			st = &GroupStats{Group: g}
			byName[g] = st
		}
		return st
	}
	for _, c := range per {
		for g, v := range c.ready {
			if g != "" { // "": the markers in lanes (Stats)
				get(g).Ready, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		for j := 0; j+1 < len(c.inflight); j += 2 {
			get(c.inflight[j]).InFlight, _ = strconv.ParseInt(c.inflight[j+1], 10, 64)
		}
		for g := range c.park {
			get(g).Parked = true
		}
		for j := 0; j+1 < len(c.due); j += 2 {
			// (A time left by a put-back that came first is no park.)
			if st := byName[c.due[j]]; st != nil && st.Parked {
				st.RateParked = true
			}
		}
	}
	out := make([]GroupStats, 0, len(byName))
	for g, st := range byName {
		if st.Ready <= 0 && st.InFlight <= 0 && !st.Parked {
			continue
		}
		limits := per[0].limits // SetGroupLimit writes every shard alike
		v, ok := limits[g]
		if !ok {
			v = limits[""]
		}
		st.Limit, st.Rate = parseLimit(v)
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b GroupStats) int {
		if c := cmp.Compare(b.Ready+b.InFlight, a.Ready+a.InFlight); c != 0 {
			return c
		}
		return cmp.Compare(a.Group, b.Group)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}
