package main

// Faithful re-implementations of the five source articles (shared/seeds),
// so that every "better" is measured against what it improves on. Where an
// article leaves a choice open (how long to sleep when empty), the choice is
// named in the comment.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/mediocregopher/radix/v4"
)

type seedBase struct {
	c      radix.Client
	prefix string
}

// seedSystem marks the seed designs, which the default run leaves out.
type seedSystem interface{ seed() }

func (s *seedBase) seed() {}

func (s *seedBase) prep(tag string) {
	s.prefix = fmt.Sprintf("bench:%s:%d:", tag, time.Now().UnixNano())
}

func (s *seedBase) cleanup(ctx context.Context) {
	var keys []string
	_ = s.c.Do(ctx, radix.Cmd(&keys, "KEYS", s.prefix+"*"))
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		_ = s.c.Do(ctx, radix.Cmd(nil, "DEL", keys[:n]...))
		keys = keys[n:]
	}
}

// ---- seed 002: three lists, LLEN polling every 20 ms ----------------------

// seed002 pushes with LPUSH and, every 20 ms, LLENs the high, medium and low
// lists and RPOPs one message from the first non-empty one (the article's
// setInterval(getMessage, 20)). LLEN-then-RPOP races between consumers; an
// RPOP that finds the list emptied by another consumer gets nothing.
type seed002 struct{ seedBase }

func (s *seed002) Name() string                                            { return "seed 002 LLEN poll 20ms" }
func (s *seed002) Reliable() bool                                          { return false }
func (s *seed002) Priorities() bool                                        { return true }
func (s *seed002) Delays() bool                                            { return false }
func (s *seed002) Prepare(context.Context) error                           { s.prep("s002"); return nil }
func (s *seed002) Cleanup(ctx context.Context)                             { s.cleanup(ctx) }
func (s *seed002) key(level int) string                                    { return s.prefix + "queue_" + strconv.Itoa(level) }
func (s *seed002) EnqueueAt(context.Context, int, []byte, time.Time) error { return errUnsupported }
func (s *seed002) Enqueue(ctx context.Context, level int, p []byte) error {
	return s.c.Do(ctx, radix.Cmd(nil, "LPUSH", s.key(level), string(p)))
}
func (s *seed002) EnqueueBatch(ctx context.Context, lv []int, ps [][]byte) error {
	pl := radix.NewPipeline()
	for i := range ps {
		pl.Append(radix.Cmd(nil, "LPUSH", s.key(lv[i]), string(ps[i])))
	}
	return s.c.Do(ctx, pl)
}
func (s *seed002) Consume(ctx context.Context, workers, _ int, handle func([]byte)) error {
	return runWorkers(ctx, workers, func(ctx context.Context) error {
		tick := time.NewTimer(20 * time.Millisecond)
		defer tick.Stop()
		lens := make([]int, levels)
		pl := radix.NewPipeline()
		for l := levels - 1; l >= 0; l-- {
			pl.Append(radix.Cmd(&lens[l], "LLEN", s.key(l))) // async.parallel: concurrent LLENs
		}
		if err := s.c.Do(ctx, pl); err != nil {
			return err
		}
		for l := levels - 1; l >= 0; l-- {
			if lens[l] > 0 {
				var mb radix.Maybe
				var b []byte
				mb.Rcv = &b
				if err := s.c.Do(ctx, radix.Cmd(&mb, "RPOP", s.key(l))); err != nil {
					return err
				}
				if !mb.Null {
					handle(b)
				}
				break
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		return nil
	})
}

// ---- seed 000: sorted set, WATCH + ZRANGE 0 0 + MULTI/ZREM/EXEC ------------

// seed000 scores members by time << 8 and pops the lowest score with an
// optimistic transaction retried until EXEC succeeds. It has no blocking wait;
// when empty the caller sleeps 10 ms (our choice: the article does not say).
type seed000 struct{ seedBase }

func (s *seed000) Name() string                                            { return "seed 000 WATCH/MULTI zset" }
func (s *seed000) Reliable() bool                                          { return false }
func (s *seed000) Priorities() bool                                        { return false }
func (s *seed000) Delays() bool                                            { return false }
func (s *seed000) Prepare(context.Context) error                           { s.prep("s000"); return nil }
func (s *seed000) Cleanup(ctx context.Context)                             { s.cleanup(ctx) }
func (s *seed000) key() string                                             { return s.prefix + "q" }
func (s *seed000) score() string                                           { return strconv.FormatInt(time.Now().UnixMilli()<<8, 10) }
func (s *seed000) EnqueueAt(context.Context, int, []byte, time.Time) error { return errUnsupported }
func (s *seed000) Enqueue(ctx context.Context, _ int, p []byte) error {
	return s.c.Do(ctx, radix.Cmd(nil, "ZADD", s.key(), s.score(), string(p)))
}
func (s *seed000) EnqueueBatch(ctx context.Context, _ []int, ps [][]byte) error {
	pl := radix.NewPipeline()
	for _, p := range ps {
		pl.Append(radix.Cmd(nil, "ZADD", s.key(), s.score(), string(p)))
	}
	return s.c.Do(ctx, pl)
}
func (s *seed000) Consume(ctx context.Context, workers, _ int, handle func([]byte)) error {
	return runWorkers(ctx, workers, func(ctx context.Context) error {
		var got []byte
		err := s.c.Do(ctx, radix.WithConn(s.key(), func(ctx context.Context, conn radix.Conn) error {
			for {
				if err := conn.Do(ctx, radix.Cmd(nil, "WATCH", s.key())); err != nil {
					return err
				}
				var head []string
				if err := conn.Do(ctx, radix.Cmd(&head, "ZRANGE", s.key(), "0", "0")); err != nil {
					return err
				}
				if len(head) == 0 {
					return conn.Do(ctx, radix.Cmd(nil, "UNWATCH"))
				}
				var exec radix.Maybe
				if err := conn.Do(ctx, radix.Cmd(nil, "MULTI")); err != nil {
					return err
				}
				if err := conn.Do(ctx, radix.Cmd(nil, "ZREM", s.key(), head[0])); err != nil {
					return err
				}
				if err := conn.Do(ctx, radix.Cmd(&exec, "EXEC")); err != nil {
					return err
				}
				if !exec.Null {
					got = []byte(head[0])
					return nil
				}
			}
		}))
		if err != nil {
			return err
		}
		if got == nil {
			time.Sleep(10 * time.Millisecond)
			return nil
		}
		handle(got)
		return nil
	})
}

// ---- seed 003: delay zset, range-then-ZREM, whole seconds, sleep 1 s -------

// seed003 scores by due time in whole seconds, pops every due member with
// ZREVRANGEBYSCORE then ZREM without checking what ZREM removed, so two
// consumers can both get the same task, and sleeps 1 s when nothing is due.
type seed003 struct{ seedBase }

func (s *seed003) Name() string                  { return "seed 003 range+ZREM delay" }
func (s *seed003) Reliable() bool                { return false }
func (s *seed003) Priorities() bool              { return false }
func (s *seed003) Delays() bool                  { return true }
func (s *seed003) Prepare(context.Context) error { s.prep("s003"); return nil }
func (s *seed003) Cleanup(ctx context.Context)   { s.cleanup(ctx) }
func (s *seed003) key() string                   { return s.prefix + "q" }
func (s *seed003) Enqueue(ctx context.Context, l int, p []byte) error {
	return s.EnqueueAt(ctx, l, p, time.Now())
}
func (s *seed003) EnqueueAt(ctx context.Context, _ int, p []byte, due time.Time) error {
	return s.c.Do(ctx, radix.Cmd(nil, "ZADD", s.key(), strconv.FormatInt(due.Unix(), 10), string(p)))
}
func (s *seed003) EnqueueBatch(ctx context.Context, _ []int, ps [][]byte) error {
	pl := radix.NewPipeline()
	now := strconv.FormatInt(time.Now().Unix(), 10)
	for _, p := range ps {
		pl.Append(radix.Cmd(nil, "ZADD", s.key(), now, string(p)))
	}
	return s.c.Do(ctx, pl)
}
func (s *seed003) Consume(ctx context.Context, workers, _ int, handle func([]byte)) error {
	return runWorkers(ctx, workers, func(ctx context.Context) error {
		var items []string
		now := strconv.FormatInt(time.Now().Unix(), 10)
		if err := s.c.Do(ctx, radix.Cmd(&items, "ZREVRANGEBYSCORE", s.key(), now, "0")); err != nil {
			return err
		}
		if len(items) == 0 {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			return nil
		}
		if err := s.c.Do(ctx, radix.Cmd(nil, "ZREM", append([]string{s.key()}, items...)...)); err != nil {
			return err
		}
		for _, it := range items {
			handle([]byte(it))
		}
		return nil
	})
}

// ---- seed 004: uuid string per payload + time zset; ZREM as the claim -------

// seed004 stores each payload under its own uuid key and the key in a zset
// scored by time (whole seconds); pop takes 5 due keys, ZREMs them in a
// pipeline, keeps those whose ZREM returned 1, MGETs and DELs them: four round
// trips. When nothing is due it sleeps 100 ms (our choice: the article has no
// loop).
type seed004 struct{ seedBase }

func (s *seed004) Name() string                  { return "seed 004 ZREM-claim+MGET" }
func (s *seed004) Reliable() bool                { return false }
func (s *seed004) Priorities() bool              { return false }
func (s *seed004) Delays() bool                  { return true }
func (s *seed004) Prepare(context.Context) error { s.prep("s004"); return nil }
func (s *seed004) Cleanup(ctx context.Context)   { s.cleanup(ctx) }
func (s *seed004) key() string                   { return s.prefix + "q" }
func (s *seed004) Enqueue(ctx context.Context, l int, p []byte) error {
	return s.EnqueueAt(ctx, l, p, time.Now())
}
func (s *seed004) EnqueueAt(ctx context.Context, _ int, p []byte, due time.Time) error {
	var b [16]byte
	_, _ = rand.Read(b[:])
	dk := s.prefix + "data_" + hex.EncodeToString(b[:])
	if err := s.c.Do(ctx, radix.Cmd(nil, "SET", dk, string(p))); err != nil {
		return err
	}
	return s.c.Do(ctx, radix.Cmd(nil, "ZADD", s.key(), strconv.FormatInt(due.Unix(), 10), dk))
}
func (s *seed004) EnqueueBatch(ctx context.Context, lv []int, ps [][]byte) error {
	for i := range ps {
		if err := s.Enqueue(ctx, lv[i], ps[i]); err != nil {
			return err
		}
	}
	return nil
}
func (s *seed004) Consume(ctx context.Context, workers, _ int, handle func([]byte)) error {
	return runWorkers(ctx, workers, func(ctx context.Context) error {
		var ids []string
		now := strconv.FormatInt(time.Now().Unix(), 10)
		if err := s.c.Do(ctx, radix.Cmd(&ids, "ZRANGEBYSCORE", s.key(), "0", now, "LIMIT", "0", "5")); err != nil {
			return err
		}
		if len(ids) == 0 {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}
		pl := radix.NewPipeline()
		flags := make([]int, len(ids))
		for i, id := range ids {
			pl.Append(radix.Cmd(&flags[i], "ZREM", s.key(), id))
		}
		if err := s.c.Do(ctx, pl); err != nil {
			return err
		}
		var mine []string
		for i, id := range ids {
			if flags[i] == 1 {
				mine = append(mine, id)
			}
		}
		if len(mine) == 0 {
			return nil
		}
		var data [][]byte
		if err := s.c.Do(ctx, radix.Cmd(&data, "MGET", mine...)); err != nil {
			return err
		}
		if err := s.c.Do(ctx, radix.Cmd(nil, "DEL", mine...)); err != nil {
			return err
		}
		for _, d := range data {
			if d != nil {
				handle(d)
			}
		}
		return nil
	})
}
