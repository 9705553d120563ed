package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/mediocregopher/radix/v4/resp/resp3"
)

// Every Redis call prioq makes goes through do, which gives it a deadline and
// returns when that deadline passes even if the client does not.
//
// Why the second part: radix v4.1.4 keeps a connection whose call timed out
// before any reply byte arrived, and discards the late reply in the
// background; when the peer is gone without a reset (a half-open TCP
// connection: a NAT or a vanished host), the next call on that connection
// waits for its reply past its own deadline, until TCP gives up (~15 minutes).
// do returns at the deadline; the call itself ends when radix lets go of it.
// Dialer (dialer.go) closes such connections so that radix lets go within
// seconds and the pool heals.

// isReply reports whether err is an error reply from Redis: the call got its
// answer, so the receivers of the commands that succeeded (in a pipeline)
// hold theirs. After any other error a receiver may still be written by the
// client (radix discards a late reply into it), so it must not be read.
func isReply(err error) bool {
	var se resp3.SimpleError
	var be resp3.BlobError
	return errors.As(err, &se) || errors.As(err, &be)
}

// blockMargin is how much longer than its server-side timeout prioq waits for
// a blocking call before it gives up on it (the connection is then closed, so
// the server stops waiting too).
const blockMargin = 2 * time.Second

// abandonGrace is how long do still waits for a call after its ctx ended:
// radix returns promptly with a reply that was on its way (it waits for its
// reader), and for a blocking pop that reply is a message.
const abandonGrace = 250 * time.Millisecond

// errAbandoned marks a call that do stopped waiting for: its receivers may
// still be written by the client, so the caller must not read them.
var errAbandoned = errors.New("redis call abandoned at its deadline")

// do runs a on the shard's client with ctx, adding CallTimeout when ctx has
// no deadline. A single command or a script refused because its slot is
// moving between cluster nodes (TRYAGAIN, or a cluster briefly down; radix
// itself follows MOVED and ASK for these) did not run, and is sent again
// after a short wait until the deadline: a resharding is routine work that
// callers should not see. Pipelines and WithConn are their callers' to
// retry (see retryRedirects): their commands are judged one by one.
func (s *Shard) do(ctx context.Context, a radix.Action) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
	}
	if _, pipe := a.(*radix.Pipeline); pipe || !a.Properties().CanRetry {
		return doBounded(ctx, s.c, s.cfg.CallTimeout, a)
	}
	// An error reply leaves the action unused (radix pools it only after a
	// reply it decoded), so it can go again.
	return retryRedirects(ctx, func(ctx context.Context) error { return doBounded(ctx, s.c, s.cfg.CallTimeout, a) })
}

// closedUnder reports whether err is radix's "closed", or a connection
// closed under the call (net.ErrClosed), from a pool that a Cluster client
// closed under a call (after a topology change, or the pool a
// redirected call opened losing to another's): not the caller's doing, and
// a blocking wait may simply go again.
func closedUnder(c Client, err error) bool {
	_, cluster := c.(*radix.Cluster)
	return cluster && err != nil && (err.Error() == "closed" || errors.Is(err, net.ErrClosed))
}

// isRedirect reports whether err is a cluster node's refusal to run a
// command here and now: MOVED or ASK (its slot is elsewhere, or moving),
// TRYAGAIN (a multi-key command while its slot moves), CLUSTERDOWN.
func isRedirect(err error) bool {
	var se resp3.SimpleError
	if !errors.As(err, &se) {
		return false
	}
	msg := se.Error()
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// doPipeline runs the pipeline build makes, again (a new one) while a
// redirect refuses any of its commands, within ctx's deadline (CallTimeout
// when it has none): for pipelines that read, or whose writes are the same
// done twice. build resets the receivers it writes into.
func (s *Shard) doPipeline(ctx context.Context, build func() *radix.Pipeline) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
	}
	return retryRedirects(ctx, func(ctx context.Context) error { return s.do(ctx, build()) })
}

// retryRedirects runs call again while it fails with a redirect, waiting 5 ms
// and then twice as long each time (at most 100 ms), until ctx ends, or its
// redirect budget (withRedirectBudget) is spent; call builds its actions
// afresh each time. It returns call's last error.
func retryRedirects(ctx context.Context, call func(context.Context) error) error {
	wait := 5 * time.Millisecond
	var until time.Time
	if d, ok := ctx.Value(redirectBudgetKey{}).(time.Duration); ok {
		until = time.Now().Add(d)
	}
	for {
		err := call(ctx)
		if !isRedirect(err) || !until.IsZero() && time.Now().Add(wait).After(until) || !sleepCtx(ctx, wait) {
			return err
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

type redirectBudgetKey struct{}

// redirectBudget is how long a fetch keeps retrying a call that a cluster
// node refuses because its slot is moving, when the fetch has other work to
// turn to: long enough for the brief refusals of a move that ends at once,
// short enough that the other shards or queues are not kept waiting.
const redirectBudget = 50 * time.Millisecond

// withRedirectBudget makes the calls made with ctx stop retrying a redirect
// after d and return it: for the calls of a fetch that can serve others
// meanwhile (a sharded queue's other shards, a MultiConsumer's other
// queues). Retrying a half-moved slot until the call's deadline inside the
// one fetch every caller waits on kept everything else waiting with it (10 s
// at a time). The caller leaves that shard or queue alone for a while
// instead (movedAway).
func withRedirectBudget(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, redirectBudgetKey{}, d)
}

// movedAway reports whether err says that a call's slot is moving between
// cluster nodes (a redirect that outlasted its budget): routine, not worth
// reporting to OnError each time.
func movedAway(err error) bool { return isRedirect(err) }

// doBounded runs a on c and returns when it returns or, at the latest,
// abandonGrace after ctx (given timeout when it has no deadline) ends. When it
// gives up, a may still run to completion in Redis, as with any cancelled call.
func doBounded(ctx context.Context, c Client, timeout time.Duration, a radix.Action) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	done := make(chan error, 1)
	Go(ctx, func() { done <- c.Do(ctx, a) })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t := time.NewTimer(abandonGrace)
		defer t.Stop()
		select {
		case err := <-done:
			return err
		case <-t.C:
			return fmt.Errorf("%w: %w", errAbandoned, ctx.Err())
		}
	}
}

// write runs a write that acknowledges something to a caller (an enqueue, an
// ack, a retry, a dead-lettering). With Config.WaitReplicas it then sends
// WAIT on the same connection, so that Redis waits until that many replicas
// have every write made so far (this one included), up to WaitTimeout. When
// fewer confirm, or WAIT fails, the write has still been made: write returns
// an error wrapping ErrNotReplicated, and a's receivers hold its reply.
func (s *Shard) write(ctx context.Context, a radix.Action) error {
	err, notRepl := s.writeWait(ctx, a)
	if err != nil {
		return err
	}
	return notRepl
}

// writeWait is write for pipelines, whose commands Redis judges one by one:
// an error reply of one (a refused HINCRBY at maxmemory, say) does not mean
// the others wrote nothing, so WAIT is sent after it too. It returns a's
// error and, apart, the replication verdict (nil, or wrapping
// ErrNotReplicated); without WaitReplicas the verdict is nil.
func (s *Shard) writeWait(ctx context.Context, a radix.Action) (err, notRepl error) {
	want := s.cfg.WaitReplicas
	if want <= 0 {
		return s.do(ctx, a), nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
	}
	var got int
	var aErr error
	wrote := false
	_, pipe := a.(*radix.Pipeline)
	call := func(ctx context.Context) error {
		return s.do(ctx, radix.WithConn(s.k.slotKey(), func(ctx context.Context, conn radix.Conn) error {
			aErr = conn.Do(ctx, a)
			if aErr != nil && (!isReply(aErr) || !pipe && isRedirect(aErr)) {
				return aErr // nothing written: no WAIT
			}
			wrote = true
			// Rounded up: "WAIT n 0" would wait forever (Open refuses a
			// WaitTimeout under MinDuration anyway).
			return conn.Do(ctx, radix.Cmd(&got, "WAIT", strconv.Itoa(want), fmtInt(leaseMs(s.cfg.WaitTimeout))))
		}))
	}
	if pipe {
		err = call(ctx) // its callers redo what a redirect refused
	} else {
		err = retryRedirects(ctx, call) // a script or command refused did not run
	}
	switch {
	case errors.Is(err, errAbandoned):
		return err, nil
	case err != nil && wrote:
		return aErr, fmt.Errorf("%w: WAIT failed: %w", ErrNotReplicated, err)
	case err != nil:
		return err, nil
	case got < want:
		return aErr, fmt.Errorf("%w: %d of %d replicas confirmed within %v", ErrNotReplicated, got, want, s.cfg.WaitTimeout)
	}
	return aErr, nil
}

// SleepCtx waits d or until ctx is done; it reports whether d elapsed.
func SleepCtx(ctx context.Context, d time.Duration) bool { return sleepCtx(ctx, d) }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
