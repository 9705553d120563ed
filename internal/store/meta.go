package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediocregopher/radix/v4"
)

// meta.go: a queue's meta key (what Open writes or checks), and what Open
// asks the server before it trusts it.

// storageFormat is written to the meta key; bump it when the stored form of
// keys or envelopes changes incompatibly. A queue of several shards says
// shardedFormat, which versions before shards refuse to open. A Range queue
// made since priorities have lists of their own (keys.go) says
// rangeListsFormat, sharded or not, which earlier versions refuse; one made
// before keeps its format and its segments of seq‖envelope (seqMembers).
// A queue of one shard and more than filledLanes lanes, Range or
// AtLeastOnce Levels, made since the filled index exists says filledFormat;
// one made before keeps its format and has none (Layout.unfilled).
const (
	storageFormat    = "2"
	shardedFormat    = "3"
	rangeListsFormat = "4"
	filledFormat     = "5"
)

// FindSortedRange marks a Range queue as RangeSorted when its meta key is
// missing but its segments hold members of that form (not priorities' names):
// a restart without persistence can lose the meta key of a queue that
// earlier versions stored, and writing format 4 over its data would leave its
// messages passed by. One EXISTS, and when the meta key is missing one
// ZRANGE of the first few members per segment; nothing for other layouts.
//
// A member that names a priority (as the scripts write it, lua/inc/index.lua
// index_prio) says format 4, whatever else is there: its lists exist, and
// its takes set aside, alone, what names no priority (an entry of the
// earlier form goes to the dead letters, from where RequeueDead puts it
// back). Without one, any member says RangeSorted (whose members are a
// sequence and an envelope). (On
// issue 29's base one member such as "x" at the head of a segment of format
// 4 was enough to serve the queue as RangeSorted: its names were taken as
// messages and buried, their lists left unread.)
//
// shards are every shard of the queue, shard 0 first; their shared Config
// is marked.
func FindSortedRange(ctx context.Context, shards []*Shard) error {
	cfg, name := shards[0].cfg, shards[0].name
	if !cfg.Layout.isRange() || cfg.Layout.seqMembers {
		return nil
	}
	var exists int
	if err := shards[0].do(ctx, radix.Cmd(&exists, "EXISTS", shards[0].k.meta)); err != nil {
		return fmt.Errorf("prioq: open %q: %w", name, err)
	}
	if exists == 1 {
		return nil // writeMeta reads its format
	}
	var named, sorted atomic.Bool
	err := Each(shards, func(_ int, s *Shard) error {
		heads := make([][]string, len(s.k.lanes))
		err := s.doPipeline(ctx, func() *radix.Pipeline {
			p := radix.NewPipeline()
			for i, l := range s.k.lanes {
				heads[i] = nil
				p.Append(radix.Cmd(&heads[i], "ZRANGE", l, "0", "7"))
			}
			return p
		})
		if err != nil && !isReply(err) { // (a lane of the wrong type: not this)
			return err
		}
		for _, h := range heads {
			for _, m := range h {
				if isIndexName(m) {
					named.Store(true)
				} else {
					sorted.Store(true)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prioq: open %q: %w", name, err)
	}
	if sorted.Load() && !named.Load() {
		cfg.Layout.seqMembers = true
	}
	return nil
}

// isIndexName reports whether m is a priority as a Range index of format 4
// names it: the decimal form strconv writes, within the layout's bounds
// (lua/inc/index.lua index_prio reads the same).
func isIndexName(m string) bool {
	p, err := strconv.ParseInt(m, 10, 64)
	return err == nil && p <= MaxRangePriority && p >= -MaxRangePriority && strconv.FormatInt(p, 10) == m
}

// KeepMeta is keepMeta: see there.
func (s *Shard) KeepMeta(ctx context.Context, report func(error)) { s.keepMeta(ctx, report) }

// WriteMeta is writeMeta: Open's call (opening), and keepMeta's.
func (s *Shard) WriteMeta(ctx context.Context, opening bool) error { return s.writeMeta(ctx, opening) }

// CheckEviction is checkEviction: see there.
func (s *Shard) CheckEviction(ctx context.Context) error { return s.checkEviction(ctx) }

// keepMeta puts the queue's meta key back if a restart without persistence
// lost it (open.lua writes it only when it is missing), so that Open keeps
// refusing a different configuration: every few rounds of the sweeper
// (AtLeastOnce) or of the promoter (AtMostOnce). A failure (a different
// configuration stored meanwhile, a full Redis) goes to report and is left to
// the next time.
func (s *Shard) keepMeta(ctx context.Context, report func(error)) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if err := s.writeMeta(cctx, false); err != nil && ctx.Err() == nil {
		report(err)
	}
}

// writeMeta creates the queue's meta record, or checks the one there: a
// queue stored with another layout, mode, shard count or format is
// ErrConfigMismatch. A queue of one shard has no shards field, as before
// shards existed; one of several is format 3, which earlier versions refuse.
// Opening (the first call, before the queue is used), a Range queue of the
// format before 4 is taken as it is: its layout is marked seqMembers; one
// stored before format 5 where it would now be (a filled index) is marked
// unfilled.
func (s *Shard) writeMeta(ctx context.Context, opening bool) error {
	cfg := s.cfg
	format, shards, shardsArg := storageFormat, strconv.Itoa(cfg.Shards), ""
	if cfg.Shards > 1 {
		format, shardsArg = shardedFormat, shards
	}
	legacy := format
	if cfg.Layout.isRange() && !cfg.Layout.seqMembers {
		format = rangeListsFormat
	}
	unfilled := format // what the queue was before the filled index
	if s.filled() {
		format = filledFormat
	}
	var got []string
	err := s.do(ctx, openScript.Cmd(&got, []string{s.k.meta}, cfg.Layout.String(), cfg.Mode.String(), format, shardsArg))
	if noScripting(err) {
		return fmt.Errorf("%w: open %q: the server runs no Lua scripts (%w); prioq needs Redis >= 7.0 or Valkey >= 7.2 with scripting",
			ErrUnsupportedServer, s.name, err)
	}
	if err != nil {
		return fmt.Errorf("prioq: open %q: %w", s.name, err)
	}
	if len(got) != 4 {
		return fmt.Errorf("prioq: open %q: %w: meta reply %q", s.name, ErrScript, got)
	}
	if got[3] == "" {
		got[3] = "1"
	}
	// cfg is the queue's: every shard sees what is found here.
	if opening && got[2] != format && got[2] == unfilled && format == filledFormat {
		cfg.Layout.unfilled = true
		format = unfilled
	}
	if opening && got[2] != format && got[2] == legacy && cfg.Layout.isRange() {
		cfg.Layout.seqMembers, cfg.Layout.unfilled = true, false
		format = legacy
	}
	if got[0] != cfg.Layout.String() || got[1] != cfg.Mode.String() || got[2] != format || got[3] != shards {
		return fmt.Errorf("%w: %q is %s/%s/%s shards (format %s), opened as %s/%s/%s shards (format %s)", ErrConfigMismatch,
			s.name, got[0], got[1], got[3], got[2], cfg.Layout, cfg.Mode, shards, format)
	}
	return nil
}

// noScripting reports whether err is a server's refusal to run a script at
// all: EVAL or EVALSHA unknown (renamed away, or a server built without Lua)
// or scripting switched off. open.lua is the first script a queue runs, so
// Open says so instead of the first enqueue failing.
func noScripting(err error) bool {
	if !isReply(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown command") && strings.Contains(msg, "eval") ||
		strings.Contains(msg, "scripting") && (strings.Contains(msg, "disabled") || strings.Contains(msg, "not available"))
}

// onNodeOf issues a command that names no key on the node of key (a
// Cluster client routes by keys), on a shared connection. Not WithConn: it
// takes a connection out of the pool, and radix v4.1.4 wakes only one of the
// calls waiting for a shared connection per connection put back, so calls
// that came while every connection was out wait until their deadline (seen:
// concurrent Opens and Stats on a pool of 8, 8 of 50 Stats timed out).
func onNodeOf(key string) radix.CmdConfig {
	return radix.CmdConfig{ActionProperties: func(cmd string, args ...string) radix.ActionProperties {
		p := radix.DefaultActionProperties(cmd, args...)
		p.Keys = []string{key}
		return p
	}}
}

// checkEviction refuses a server whose maxmemory-policy may evict any key
// (allkeys-*): it would delete lanes, leases and delayed messages silently.
// volatile-* policies evict only keys with a TTL, and prioq sets none. It asks
// the server that holds the queue (on a cluster, the node of its hash slot).
// CONFIG may be renamed or denied; then it says so in a log line and goes on.
func (s *Shard) checkEviction(ctx context.Context) error {
	var kv []string
	err := s.do(ctx, onNodeOf(s.k.slotKey()).Cmd(&kv, "CONFIG", "GET", "maxmemory-policy"))
	if err != nil || len(kv) != 2 {
		s.cfg.Logger.WarnContext(ctx, "prioq: could not read maxmemory-policy; an allkeys-* policy would evict queued messages silently",
			"queue", s.name, "error", err)
		return nil
	}
	if policy := kv[1]; strings.HasPrefix(policy, "allkeys-") && !s.cfg.AllowEviction {
		return fmt.Errorf("%w: %q is on a server with maxmemory-policy %s (set Config.AllowEviction to open it anyway)",
			ErrUnsafeEviction, s.name, policy)
	}
	return nil
}

// Each runs f on every shard, at most 16 at once, and joins their errors.
func Each(shards []*Shard, f func(i int, s *Shard) error) error {
	if len(shards) == 1 {
		return f(0, shards[0])
	}
	errs := make([]error, len(shards))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i, s)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StoredMeta is what a queue's meta key says of it (ReadMeta).
type StoredMeta struct {
	Layout Layout
	Mode   Mode
	Shards int
}

// ReadMeta reads the meta key of queue name, for tools that open queues they
// did not create: ErrNotFound without one, ErrConfigMismatch when what it
// says does not parse. One round trip, bounded by timeout when ctx has no
// deadline.
func ReadMeta(ctx context.Context, c Client, name string, timeout time.Duration) (StoredMeta, error) {
	k := newKeySet(name, 1)
	var got []string
	if err := doBounded(ctx, c, timeout, radix.Cmd(&got, "HMGET", k.meta, "layout", "mode", "shards")); err != nil {
		return StoredMeta{}, fmt.Errorf("prioq: open %q: %w", name, err)
	}
	if len(got) != 3 || got[0] == "" {
		return StoredMeta{}, fmt.Errorf("prioq: open %q: %w: no such queue", name, ErrNotFound)
	}
	var m StoredMeta
	var err error
	if m.Layout, err = ParseLayout(got[0]); err != nil {
		return StoredMeta{}, fmt.Errorf("prioq: open %q: stored %w", name, err)
	}
	switch got[1] {
	case AtLeastOnce.String():
		m.Mode = AtLeastOnce
	case AtMostOnce.String():
		m.Mode = AtMostOnce
	default:
		return StoredMeta{}, fmt.Errorf("prioq: open %q: %w: stored mode %q", name, ErrConfigMismatch, got[1])
	}
	m.Shards = 1
	if got[2] != "" {
		if m.Shards, err = strconv.Atoi(got[2]); err != nil || m.Shards < 1 {
			return StoredMeta{}, fmt.Errorf("prioq: open %q: %w: stored shards %q", name, ErrConfigMismatch, got[2])
		}
	}
	return m, nil
}
