package prioq

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediocregopher/radix/v4"

	"github.com/prioq/prioq/internal/testkit/assert"
	"github.com/prioq/prioq/internal/testkit/require"
)

// Headers travel with the message through every path it can take: a delayed
// retry, a lease that expires, the dead letters and a requeue from them.
func TestHeadersSurviveEveryPath(t *testing.T) {
	c := newClient(t)
	for _, l := range someLayouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			q := openQueue(t, c, Config{Layout: l.layout, MaxAttempts: 3})
			h := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}
			_, err := q.Enqueue(ctx, []byte("job"), ID("h-1"), Headers(h), Headers(map[string]string{"tenant": "acme"}))
			require.NoError(t, err)
			peek, err := q.Peek(ctx, 1)
			require.NoError(t, err)
			require.Len(t, peek, 1)
			assert.Equal(t, h, peek[0].Headers)

			cons := newConsumer(t, q, ConsumerConfig{Lease: 200 * time.Millisecond, SweepInterval: 50 * time.Millisecond})
			m, err := cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, h, m.Headers, "first delivery")
			require.NoError(t, m.Retry(ctx, 10*time.Millisecond, "retry me"))

			m, err = cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, h, m.Headers, "after a delayed retry")
			assert.Equal(t, 2, m.Attempts)
			// Not acked: the lease expires, the sweep redelivers it, and
			// at MaxAttempts the third delivery's expiry dead-letters it.
			m, err = cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, h, m.Headers, "after a lease expiry")
			assert.Equal(t, 3, m.Attempts)
			require.Eventually(t, func() bool {
				st, err := q.Stats(ctx)
				return err == nil && st.Dead == 1
			}, 5*time.Second, 10*time.Millisecond)
			dead := onlyDeadLetter(t, q)
			assert.Equal(t, h, dead.Headers, "in the dead letters")
			assert.Equal(t, "lease expired", dead.Reason)

			require.NoError(t, q.RequeueDead(ctx, "h-1"))
			m, err = cons.Receive(ctx)
			require.NoError(t, err)
			assert.Equal(t, h, m.Headers, "after a requeue")
			assert.Equal(t, 1, m.Attempts)
			require.NoError(t, m.Ack(ctx))
		})
	}
}

// Bad headers are refused before anything is written.
func TestHeadersLimits(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{})
	many := map[string]string{}
	for i := 0; i <= MaxHeaders; i++ {
		many[fmtInt(int64(i))] = "v"
	}
	for name, h := range map[string]map[string]string{
		"empty key":   {"": "v"},
		"long key":    {strings.Repeat("k", MaxHeaderKey+1): "v"},
		"too many":    many,
		"too many KB": {"a": strings.Repeat("v", MaxHeaderBytes)},
	} {
		_, err := q.Enqueue(ctx, []byte("x"), Headers(h), ID("bad-headers"))
		assert.ErrorIs(t, err, ErrInvalidHeader, name)
	}
	assert.Empty(t, existingKeys(t, q), "nothing written")
	_, err := q.Enqueue(ctx, []byte("x"), Headers(map[string]string{strings.Repeat("k", MaxHeaderKey): strings.Repeat("v", MaxHeaderBytes-MaxHeaderKey)}))
	assert.NoError(t, err, "exactly at the limits")
}

// A message stored before headers existed (envelope version 1, written here
// byte by byte as that version wrote it) is delivered by this version.
func TestOldEnvelopeStillDelivered(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 10*time.Second)
	q := openQueue(t, c, Config{Layout: Levels(1)})
	old := append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0, 0, 0, 0, 0, 7}, "legacy1payload"...)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "RPUSH", sh(q).Keys().Lanes()[0], string(old))))
	cons := newConsumer(t, q, ConsumerConfig{})
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "legacy1", m.ID)
	assert.Equal(t, "payload", string(m.Payload))
	assert.Equal(t, 1, m.Attempts)
	assert.True(t, m.Headers == nil)
	require.NoError(t, m.Ack(ctx))
}

// Middleware wraps Run's handler, the first one outermost, and what the
// outermost returns decides: here it turns a handler error into an ack.
// Enqueue middleware sees every Enqueue and EnqueueBatch, may add headers,
// and gets the results.
func TestMiddleware(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	var mu sync.Mutex
	var trail []string
	note := func(s string) { mu.Lock(); trail = append(trail, s); mu.Unlock() }
	stamp := func(next EnqueueFunc) EnqueueFunc {
		return func(ctx context.Context, items []EnqueueItem) ([]EnqueueResult, error) {
			for i := range items {
				items[i].Options = append(items[i].Options, Headers(map[string]string{"stamped": "yes"}))
			}
			res, err := next(ctx, items)
			note("enqueued " + fmtInt(int64(len(res))))
			return res, err
		}
	}
	q := openQueue(t, c, Config{Layout: Levels(2), EnqueueMiddleware: []EnqueueMiddleware{stamp}})
	_, err := q.Enqueue(ctx, []byte("one"), ID("mw-1"))
	require.NoError(t, err)
	_, err = q.EnqueueBatch(ctx, []EnqueueItem{{Payload: []byte("two")}, {Payload: []byte("three")}})
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, []byte("x"), Headers(map[string]string{"": "bad"}))
	assert.ErrorIs(t, err, ErrInvalidHeader, "errors pass through the middleware")

	layer := func(name string) Middleware {
		return func(next Handler) Handler {
			return func(ctx context.Context, m *Message) error {
				note(name + " in " + m.Headers["stamped"])
				err := next(ctx, m)
				note(name + " out")
				if name == "outer" {
					return nil // the outermost decides: ack despite the error
				}
				return err
			}
		}
	}
	cons := newConsumer(t, q, ConsumerConfig{Middleware: []Middleware{layer("outer"), layer("inner")}})
	rctx, stop := context.WithCancel(ctx)
	var handled sync.WaitGroup
	handled.Add(3)
	go func() {
		_ = cons.Run(rctx, func(ctx context.Context, m *Message) error {
			defer handled.Done()
			note("handler " + string(m.Payload))
			return errors.New("fails")
		})
	}()
	handled.Wait()
	require.Eventually(t, func() bool {
		st, err := q.Stats(ctx)
		return err == nil && st.InFlight == 0 && st.Ready == 0
	}, 5*time.Second, 10*time.Millisecond, "all three acked, none retried")
	stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"enqueued 1", "enqueued 2", "enqueued 0"}, trail[:3], "the refused enqueue went through it too")
	var calls []string
	for _, s := range trail[3:] {
		if !strings.HasPrefix(s, "handler") {
			calls = append(calls, s)
		}
	}
	require.Len(t, calls, 12)
	for i := 0; i < 12; i += 4 {
		assert.Equal(t, []string{"outer in yes", "inner in yes", "inner out", "outer out"}, calls[i:i+4])
	}
}

// logRecorder keeps the records a slog.Logger gets.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// find returns the attributes of the first record with this message.
func (r *logRecorder) find(msg string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Message == msg {
			out := map[string]string{}
			rec.Attrs(func(a slog.Attr) bool { out[a.Key] = a.Value.String(); return true })
			return out
		}
	}
	return nil
}

// Dead letters, redeliveries and corrupt messages reach Config.Logger with
// the queue, the id, the attempt and the error.
func TestLogs(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, 20*time.Second)
	rec := &logRecorder{}
	q := openQueue(t, c, Config{Layout: Levels(1), MaxAttempts: 1, Logger: slog.New(rec)})
	_, err := q.Enqueue(ctx, []byte("doomed"), ID("log-1"))
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx, radix.Cmd(nil, "RPUSH", sh(q).Keys().Lanes()[0], "\x09not an envelope")))
	_, err = q.Enqueue(ctx, []byte("expires"), ID("log-2"))
	require.NoError(t, err)

	cons := newConsumer(t, q, ConsumerConfig{Lease: 100 * time.Millisecond, SweepInterval: 50 * time.Millisecond, NoRenew: true})
	m, err := cons.Receive(ctx) // log-1; the corrupt one is buried by this take's batch or the next
	require.NoError(t, err)
	require.Equal(t, "log-1", m.ID)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cons.Run(rctx, func(ctx context.Context, m *Message) error {
			<-ctx.Done() // log-2 holds its lease until it expires
			return context.Cause(ctx)
		})
	}()
	require.NoError(t, m.Ack(ctx))
	require.Eventually(t, func() bool {
		return rec.find("prioq: corrupt message moved to the dead letters") != nil && rec.find("prioq: message dead-lettered") != nil
	}, 10*time.Second, 20*time.Millisecond)
	stop()
	<-done
	d := rec.find("prioq: message dead-lettered")
	assert.Equal(t, q.name, d["queue"])
	assert.Equal(t, "log-2", d["id"])
	assert.Equal(t, "1", d["attempt"])
	assert.Contains(t, d["error"], "lease expired")
	assert.Equal(t, q.name, rec.find("prioq: corrupt message moved to the dead letters")["queue"])
}
