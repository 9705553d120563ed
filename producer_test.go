package prioq

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/prioq/prioq/internal/store"
	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

func TestEnqueueBadInputWritesNothing(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			q := openQueue(t, c, Config{Layout: l.layout, MaxPayload: 16})
			bad := []struct {
				name    string
				payload []byte
				opts    []Option
				wantErr error
			}{
				{"priority above", []byte("x"), []Option{Priority(1001)}, ErrInvalidPriority},
				{"priority below", []byte("x"), []Option{Priority(-1001)}, ErrInvalidPriority},
				{"empty payload", nil, nil, ErrEmptyPayload},
				{"oversized payload", make([]byte, 17), nil, ErrPayloadTooLarge},
				{"empty id", []byte("x"), []Option{ID("")}, ErrInvalidID},
				{"id with space", []byte("x"), []Option{ID("a b")}, ErrInvalidID},
				{"long id", []byte("x"), []Option{ID(string(bytes.Repeat([]byte("i"), 129)))}, ErrInvalidID},
				{"negative delay", []byte("x"), []Option{Delay(-time.Second)}, ErrInvalidOption},
			}
			if !l.layout.l.IsRange() {
				bad[0].opts, bad[1].opts = []Option{Priority(int64(l.layout.l.Lanes()))}, []Option{Priority(-1)}
			}
			for _, b := range bad {
				_, err := q.Enqueue(ctx, b.payload, b.opts...)
				assert.ErrorIs(t, err, b.wantErr, b.name)
			}
			// A batch with one bad item stores none of the good ones.
			_, err := q.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("good")}, {Payload: nil}, {Payload: []byte("good")}})
			assert.ErrorIs(t, err, ErrEmptyPayload)
			assert.Empty(t, existingKeys(t, q))
		})
	}
}

func TestDuplicateID(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	for _, m := range bothModes {
		for _, l := range someLayouts {
			t.Run(m.name+"/"+l.name, func(t *testing.T) {
				q := openQueue(t, c, Config{Layout: l.layout, Mode: m.mode})
				id, err := q.Enqueue(ctx, []byte("a"), ID("order-1"))
				require.NoError(t, err)
				assert.Equal(t, "order-1", id)
				_, err = q.Enqueue(ctx, []byte("b"), ID("order-1"), Priority(3))
				assert.ErrorIs(t, err, ErrDuplicate)
				// Delayed duplicates are caught too, and a batch reports per item.
				res, err := q.EnqueueBatch(ctx, []EnqueueItem{
					{Payload: []byte("c"), Options: []Option{ID("order-1"), Delay(time.Hour)}},
					{Payload: []byte("d"), Options: []Option{ID("order-2")}},
					{Payload: []byte("e"), Options: []Option{ID("order-2")}},
				})
				require.NoError(t, err)
				assert.ErrorIs(t, res[0].Err, ErrDuplicate)
				assert.NoError(t, res[1].Err)
				assert.ErrorIs(t, res[2].Err, ErrDuplicate)
				// Equal payloads without ids stay distinct messages.
				_, err = q.Enqueue(ctx, []byte("a"))
				require.NoError(t, err)
				_, err = q.Enqueue(ctx, []byte("a"))
				require.NoError(t, err)
				n, err := q.Len(ctx)
				require.NoError(t, err)
				assert.EqualValues(t, 4, n)

				// Once the message is done the id can be used again.
				cons := newConsumer(t, q, ConsumerConfig{})
				for i := 0; i < 4; i++ {
					msg, err := cons.Receive(ctx)
					require.NoError(t, err)
					if m.mode == AtLeastOnce {
						require.NoError(t, msg.Ack(ctx))
					}
				}
				_, err = q.Enqueue(ctx, []byte("again"), ID("order-1"))
				assert.NoError(t, err)
			})
		}
	}
}

// prepare turns an Enqueue's arguments into what the script gets, with no
// Redis call: the lane, the due time (rounded up to the millisecond), the
// score, the envelope.
func TestPrepare(t *testing.T) {
	now := time.UnixMilli(1700000000123)
	levels := pureQueue(Config{Layout: Levels(3), MaxPayload: 16})
	rng := pureQueue(Config{Layout: Range(-1000, 1000, 7)})
	above := pureQueue(Config{Layout: Range(10, 20, 2)})
	for _, tc := range []struct {
		name  string
		q     *Queue
		opts  []Option
		lane  int
		due   string
		score string
		prio  int64
		id    string // "" for a generated one
	}{
		{"defaults", levels, nil, 0, "", "", 0, ""},
		{"top level", levels, []Option{Priority(2)}, 2, "", "", 2, ""},
		{"zero delay is ready now", levels, []Option{Delay(0)}, 0, "", "", 0, ""},
		{"1 ns delay rounds up", levels, []Option{Delay(time.Nanosecond)}, 0, "+1", "", 0, ""},
		{"1 ms delay", levels, []Option{Delay(time.Millisecond)}, 0, "+1", "", 0, ""},
		{"1 ms 1 ns delay", levels, []Option{Delay(time.Millisecond + 1)}, 0, "+2", "", 0, ""},
		{"At a millisecond", levels, []Option{At(time.UnixMilli(5000))}, 0, "5000", "", 0, ""},
		{"At rounds up", levels, []Option{At(time.UnixMilli(5000).Add(1))}, 0, "5001", "", 0, ""},
		{"caller id", levels, []Option{ID("job-1"), Priority(1)}, 1, "", "", 1, "job-1"},
		{"range bottom", rng, []Option{Priority(-1000)}, 0, "", "1000", -1000, ""},
		{"range top", rng, []Option{Priority(1000)}, 6, "", "-1000", 1000, ""},
		{"range default", rng, nil, 3, "", "0", 0, ""},
		{"range above 0, default", above, nil, 0, "", "-10", 10, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.q.prepare(now, []byte("payload"), tc.opts)
			require.NoError(t, err)
			assert.Equal(t, tc.lane, p.Lane)
			assert.Equal(t, tc.due, p.Due)
			assert.Equal(t, tc.score, p.Score)
			if tc.id != "" {
				assert.Equal(t, tc.id, p.ID)
				assert.True(t, p.Caller)
			} else {
				assert.True(t, store.IsGeneratedID(p.ID), p.ID)
				assert.False(t, p.Caller)
			}
			e, err := store.DecodeEnvelope(p.Env)
			require.NoError(t, err)
			assert.Equal(t, store.Envelope{ID: p.ID, CallerID: p.Caller, Priority: tc.prio,
				EnqueuedMs: 1700000000123, Payload: []byte("payload")}, e)
		})
	}
}

func TestPrepareBadInput(t *testing.T) {
	now := time.Now()
	q := pureQueue(Config{Layout: Levels(3), MaxPayload: 16})
	_, err := q.prepare(now, make([]byte, 16), nil)
	assert.NoError(t, err, "a payload of exactly MaxPayload")
	for _, tc := range []struct {
		name    string
		payload []byte
		opts    []Option
		want    error
	}{
		{"nil payload", nil, nil, ErrEmptyPayload},
		{"empty payload", []byte{}, nil, ErrEmptyPayload},
		{"payload over MaxPayload", make([]byte, 17), nil, ErrPayloadTooLarge},
		{"priority -1", []byte("x"), []Option{Priority(-1)}, ErrInvalidPriority},
		{"priority 3", []byte("x"), []Option{Priority(3)}, ErrInvalidPriority},
		{"negative delay", []byte("x"), []Option{Delay(-1)}, ErrInvalidOption},
		{"empty id", []byte("x"), []Option{ID("")}, ErrInvalidID},
		{"bad id before empty payload", nil, []Option{ID("a b")}, ErrInvalidID},
	} {
		_, err := q.prepare(now, tc.payload, tc.opts)
		assert.ErrorIs(t, err, tc.want, tc.name)
	}
	_, err = pureQueue(Config{}).prepare(now, make([]byte, DefaultMaxPayload+1), nil)
	assert.ErrorIs(t, err, ErrPayloadTooLarge, "the default MaxPayload")
}

// ReadyAt tells middleware when an item will be ready.
func TestEnqueueItemReadyAt(t *testing.T) {
	now := time.Unix(1700000000, 0)
	assert.Equal(t, now, EnqueueItem{}.ReadyAt(now))
	assert.Equal(t, now.Add(3*time.Second), EnqueueItem{Options: []Option{Priority(1), Delay(3 * time.Second)}}.ReadyAt(now))
	assert.Equal(t, now.Add(time.Hour), EnqueueItem{Options: []Option{At(now.Add(time.Hour))}}.ReadyAt(now))
	assert.Equal(t, now, EnqueueItem{Options: []Option{At(now.Add(-time.Hour))}}.ReadyAt(now), "a time in the past is now")
}

// A caller's ID equal to the generated id of a live message must never
// replace or shadow it, whatever state that message is in. Before the fix
// the ID was accepted: a delayed message's record was overwritten (A never
// delivered, B delivered at A's due time), and in other states two live
// messages shared one id.
func TestCallerIDCannotTakeALiveGeneratedID(t *testing.T) {
	c := newClient(t)
	states := []string{"delayed", "ready", "in flight", "dead"}
	for _, l := range someLayouts {
		for _, state := range states {
			t.Run(l.name+"/"+state, func(t *testing.T) {
				ctx := ctxT(t, 10*time.Second)
				q := openQueue(t, c, Config{Layout: l.layout})
				var opts []Option
				if state == "delayed" {
					opts = append(opts, Delay(300*time.Millisecond))
				}
				a, err := q.Enqueue(ctx, []byte("A"), opts...)
				require.NoError(t, err)
				switch state {
				case "in flight", "dead":
					got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
					require.NoError(t, err)
					require.Len(t, got, 1)
					if state == "dead" {
						require.NoError(t, got[0].fail(ctx, 0, "boom", store.FailDead))
					}
				}
				_, err = q.Enqueue(ctx, []byte("B"), ID(a), Delay(1500*time.Millisecond))
				require.Error(t, err, "an ID equal to a live generated id is refused")
				assert.True(t, errors.Is(err, ErrInvalidID) || errors.Is(err, ErrDuplicate), "err: %v", err)
				st, err := q.Stats(ctx)
				require.NoError(t, err)
				assert.Equal(t, int64(1), st.Ready+st.Delayed+st.InFlight+st.Dead, "one message, A")
				if state == "delayed" {
					cons := newConsumer(t, q, ConsumerConfig{})
					m, err := cons.Receive(ctx)
					require.NoError(t, err)
					assert.Equal(t, a, m.ID)
					assert.Equal(t, "A", string(m.Payload), "A's record is intact")
					require.NoError(t, m.Ack(ctx))
				}
			})
		}
	}
}

// legacyID has the form of the ids prioq generated before ids had a form of
// their own (20 characters of 0-9a-v): a caller may still pass such an id,
// and a message stored by an earlier version may still hold it.
const legacyID = "0ujtsle6o8e4l2ob1r80"

// sendLegacy stores a message with a generated id of the earlier form, as an
// earlier version did.
func sendLegacy(t *testing.T, q *Queue, payload string, due string) {
	t.Helper()
	p, err := q.prepare(q.now(), []byte(payload), nil)
	require.NoError(t, err)
	p.ID, p.Due = legacyID, due
	e, err := store.DecodeEnvelope(p.Env)
	require.NoError(t, err)
	e.ID = legacyID
	p.Env = e.Encode()
	res, err := sh(q).Send(context.Background(), []store.Item{p.Item})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
}

// Messages stored by an earlier version keep generated ids that a caller can
// pass: no enqueue and no delayed retry may overwrite the delayed record of
// another message with that id.
func TestLegacyGeneratedIDsKeepTheirDelayedRecords(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name+"/enqueue", func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			sendLegacy(t, q, "A", "+300")
			_, err := q.Enqueue(ctx, []byte("B"), ID(legacyID), Delay(time.Second))
			require.ErrorIs(t, err, ErrDuplicate, "the delayed record of the earlier message holds the id")
			var rec string
			require.NoError(t, c.Do(ctx, radix.Cmd(&rec, "HGET", sh(q).Keys().DStore(), legacyID)))
			assert.True(t, strings.HasSuffix(rec, "A"), "A's record is intact")
		})
		t.Run(l.name+"/retry", func(t *testing.T) {
			ctx := ctxT(t, 10*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout})
			sendLegacy(t, q, "A", "")
			_, err := q.Enqueue(ctx, []byte("B"), ID(legacyID), Delay(400*time.Millisecond))
			require.NoError(t, err, "nothing delayed holds the id: the caller's message is stored")
			got, _, err := shardTake(sh(q), ctx, sh(q).Keys().HighFirst(), 1, time.Minute)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.NoError(t, got[0].Retry(ctx, 200*time.Millisecond, "again"))
			cons := newConsumer(t, q, ConsumerConfig{})
			var payloads []string
			for range 2 {
				m, err := cons.Receive(ctx)
				require.NoError(t, err)
				payloads = append(payloads, string(m.Payload))
				require.NoError(t, m.Ack(ctx))
			}
			assert.Equal(t, []string{"A", "B"}, payloads, "both messages are delivered")
		})
	}
}

// cutProxy forwards TCP between a client and addr, until armed: then it
// forwards what the client sends only up to the first occurrence of cut,
// and closes both sides, as a connection lost half-way through a pipeline
// would: the server runs the commands it got whole, the client hears of
// none.
type cutProxy struct {
	ln    net.Listener
	armed atomic.Bool
}

func newCutProxy(t *testing.T, addr string, cut []byte) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(c, s); c.Close() }()
			go func() {
				defer s.Close()
				defer c.Close()
				buf := make([]byte, 1<<16)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						b := buf[:n]
						if i := bytes.Index(b, cut); i >= 0 && p.armed.Load() {
							c.Close() // no reply gets back either
							_, _ = s.Write(b[:i])
							time.Sleep(50 * time.Millisecond) // let the server run what it got
							return
						}
						if _, err := s.Write(b); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// A plain Range enqueue cut off after its RPUSH, before the ZADD naming the
// priority in its segment's index, stores nothing (the two are one
// transaction), rather than a list no take would ever find. Failed on
// a04cba8 (a pipeline without MULTI): the list was stored, unnamed.
func TestRangeEnqueueCutHalfWayLeavesNoHiddenList(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	proxy := newCutProxy(t, testAddr, []byte("*4\r\n$4\r\nZADD"))
	c, err := radix.PoolConfig{Size: 1}.New(ctx, "tcp", proxy.ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	q := openQueue(t, c, Config{Layout: Range(0, 1000, 4), CallTimeout: 2 * time.Second})
	proxy.armed.Store(true)
	_, err = q.Enqueue(ctx, []byte("x"), Priority(700))
	require.Error(t, err, "the connection was cut")
	proxy.armed.Store(false)

	direct := newClient(t)
	var n int64
	require.NoError(t, direct.Do(ctx, radix.Cmd(&n, "LLEN", sh(q).Keys().PrioList(700))))
	var name radix.Maybe
	var score string
	name.Rcv = &score
	require.NoError(t, direct.Do(ctx, radix.Cmd(&name, "ZSCORE", sh(q).Keys().Lanes()[2], "700")))
	if n > 0 {
		assert.False(t, name.Null, "a list of %d messages that no index names", n)
	}
}
