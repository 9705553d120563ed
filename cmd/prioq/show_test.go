package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prioq/prioq"
)

// prioq show finds a message in each state and prints what the state says;
// the payload only with --payload; an id that is nowhere exits 1, a bad
// one 2.
func TestShowCommand(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{Layout: prioq.Levels(3), MaxAttempts: 1})
	for _, id := range []string{"first", "dies", "waits"} {
		_, err := q.Enqueue(ctx, []byte("secret of "+id), prioq.ID(id), prioq.Priority(2), prioq.Headers(map[string]string{"tenant": "acme"}))
		require.NoError(t, err)
	}
	_, err := q.Enqueue(ctx, []byte("x"), prioq.ID("later"), prioq.Delay(time.Hour))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(ctx)
	taken, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "first", taken.ID)
	dies, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, dies.Retry(ctx, 0, "boom"))

	out, errOut, code := prioqCmd(t, "", "show", q.Name(), "waits")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^state +ready$`, out)
	assert.Regexp(t, `(?m)^lane +2$`, out)
	assert.Regexp(t, `(?m)^place +0 before it in its lane$`, out)
	assert.Regexp(t, `(?m)^header +"tenant"="acme"$`, out)
	assert.Regexp(t, `(?m)^payload +\(15 bytes\)$`, out)
	assert.NotContains(t, out, "secret")
	out, _, code = prioqCmd(t, "", "show", q.Name(), "waits", "--payload")
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^payload +"secret of waits"$`, out)

	out, _, code = prioqCmd(t, "", "show", q.Name(), "later")
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^state +delayed$`, out)
	assert.Regexp(t, `(?m)^due +\S+ \(in (59m5\ds|1h0m0s)\)$`, out)

	out, _, code = prioqCmd(t, "", "show", q.Name(), "first")
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^state +in flight$`, out)
	assert.Regexp(t, `(?m)^lease ends +\S+$`, out)
	assert.Regexp(t, `(?m)^lease token +\S+$`, out)
	assert.Regexp(t, `(?m)^held by +(\S+:\d+|unregistered:[0-9a-f]{12})$`, out, "the holder: this process, registered or not yet")
	assert.Regexp(t, `(?m)^attempts +0$`, out, "no delivery finished yet")

	out, _, code = prioqCmd(t, "", "show", q.Name(), "dies")
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^state +dead$`, out)
	assert.Regexp(t, `(?m)^reason +"boom"$`, out)

	_, errOut, code = prioqCmd(t, "", "show", q.Name(), "nowhere")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `no message "nowhere"`)
	_, errOut, code = prioqCmd(t, "", "show", q.Name(), "bad id")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "invalid message id")
	_, _, code = prioqCmd(t, "", "show", q.Name())
	assert.Equal(t, 2, code, "the id is needed")
}

// prioq show prints a message's progress while in flight and its record
// once finished; prioq result prints the record, the result only with
// --payload, and waits for it with --wait.
func TestShowAndResultOfFinished(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, prioq.Config{})
	_, err := q.Enqueue(ctx, []byte("x"), prioq.ID("job"))
	require.NoError(t, err)
	cons, err := q.NewConsumer(prioq.ConsumerConfig{NoPromoter: true})
	require.NoError(t, err)
	defer cons.Close(ctx)
	m, err := cons.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Progress(ctx, 30, "reading"))
	out, errOut, code := prioqCmd(t, "", "show", q.Name(), "job")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^progress +30% "reading" \(at \S+\)$`, out)
	_, _, code = prioqCmd(t, "", "result", q.Name(), "job")
	assert.Equal(t, 1, code, "not finished")

	require.NoError(t, m.SetResult([]byte("the answer")))
	require.NoError(t, m.Ack(ctx))
	out, errOut, code = prioqCmd(t, "", "show", q.Name(), "job")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^state +finished$`, out)
	assert.Regexp(t, `(?m)^outcome +acked$`, out)
	assert.Regexp(t, `(?m)^result +\(10 bytes\)$`, out)
	out, errOut, code = prioqCmd(t, "", "result", q.Name(), "job", "--payload", "--wait", "5s")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^result +"the answer"$`, out)
	assert.Regexp(t, `(?m)^attempts +1$`, out)
}
