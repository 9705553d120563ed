package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/mediocregopher/radix/v4"
)

// ops.go: the queue operations of one shard that are one call each: Peek,
// Cancel, Purge, Pause, Resume (the root's Queue methods of those names run
// them on every shard, or on the shard of an id).

// Peek describes up to n ready messages of the shard (at most MaxBatch) in
// the order its takes would get them, taking nothing (peek.lua).
func (s *Shard) Peek(ctx context.Context, n int) ([]Info, error) {
	var raw [][]byte
	if err := s.do(ctx, s.eval(peekScript, &raw, s.k.highFirst, strconv.Itoa(min(n, MaxBatch)), s.kind())); err != nil {
		return nil, fmt.Errorf("prioq: peek %q: %w", s.name, err)
	}
	out := make([]Info, 0, len(raw))
	for _, b := range raw {
		e, err := s.decodeLaneEntry(b)
		if err != nil {
			return out, fmt.Errorf("prioq: peek %q: %w", s.name, err)
		}
		out = append(out, InfoOf(e))
	}
	return out, nil
}

// cancel is Cancel on one shard.
func (s *Shard) Cancel(ctx context.Context, id string) error {
	var n int
	if err := s.do(ctx, s.eval(cancelScript, &n, s.k.cancelKeys, id, s.kind())); err != nil {
		return fmt.Errorf("prioq: cancel %q in %q: %w", id, s.name, err)
	}
	if n == 0 {
		return fmt.Errorf("prioq: cancel %q in %q: %w", id, s.name, ErrNotFound)
	}
	return nil
}

// Purge is the root's Purge on one shard.
func (s *Shard) Purge(ctx context.Context) (int64, error) {
	var n int64
	if err := s.do(ctx, s.eval(purgeScript, &n, s.k.purgeKeys, s.kind(), s.armFlag())); err != nil {
		return 0, fmt.Errorf("prioq: purge %q: %w", s.name, err)
	}
	return n, nil
}

// Pause is the root's Pause on one shard.
func (s *Shard) Pause(ctx context.Context) error {
	if err := s.do(ctx, pauseScript.Cmd(nil, []string{s.k.paused}, s.kind())); err != nil {
		return fmt.Errorf("prioq: pause %q: %w", s.name, err)
	}
	return nil
}

// Resume is the root's Resume on one shard.
func (s *Shard) Resume(ctx context.Context) error {
	var deleted int64 // DEL's reply; -1 until it arrives
	err := s.doPipeline(ctx, func() *radix.Pipeline {
		deleted = -1
		p := radix.NewPipeline()
		p.Append(radix.Cmd(&deleted, "DEL", s.k.paused))
		p.Append(radix.Cmd(nil, "ZADD", s.k.wake, "LT", "-inf", wakeMember)) // what waits is not known
		p.Append(radix.Cmd(nil, "SPUBLISH", s.k.wake, announceResumed))      // for a MultiConsumer
		return p
	})
	if err != nil && !(isReply(err) && deleted >= 0) {
		return fmt.Errorf("prioq: resume %q: %w", s.name, err)
	}
	return nil
}
