package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/mediocregopher/radix/v4"
	"github.com/mediocregopher/radix/v4/resp/resp3"
)

// subscription.go: a connection subscribed to shard channels (SSUBSCRIBE),
// where writes that make work ready announce it (keys.go wake), for a
// MultiConsumer's listener.

// ErrSlotMoved: the node dropped a subscription by itself, or refused one
// (MOVED), because the channel's slot moved to another node.
var ErrSlotMoved = errors.New("prioq: a served shard's slot moved")

// Subscription is one connection of a node's pool, held for the life of
// Listen's serve: every command it sends reads its own reply, and what the
// node pushes in between (an announcement) goes to its handler, so that a
// reply is never read as an announcement or the other way round.
type Subscription struct {
	conn    radix.Conn
	timeout time.Duration
	handle  func(channel, message string)
}

// Listen takes a connection of key's node from c's pool and runs serve
// with it subscribed to nothing yet; handle gets every announcement
// (channel, message) read while serve runs. The connection never goes back
// to the pool: it is closed after serve, whatever serve returns (a
// subscribed connection, or one with replies unread, must serve no other
// call). Commands of the Subscription have a deadline of timeout each.
func Listen(ctx context.Context, c Client, key string, timeout time.Duration, handle func(channel, message string),
	serve func(ctx context.Context, sub *Subscription) error) error {
	return spentCause(c.Do(ctx, radix.WithConn(key, func(ctx context.Context, conn radix.Conn) error {
		return connSpent{serve(ctx, &Subscription{conn: conn, timeout: timeout, handle: handle})}
	})))
}

// connSpent carries the outcome of a WithConn whose connection may be left in
// a state no other call may see (subscribed, or with replies not read yet).
// radix v4.1.4's pool puts a connection back after nil or a Redis error
// reply (pool.Do's isRespErr, which looks through wrapped errors with
// errors.As) and closes it after any other error: connSpent is never nil and
// does not unwrap, so radix always closes the connection. Seen before: an
// SSUBSCRIBE refused with NOPERM returned as it was put a subscribed
// connection back, and other callers read each other's replies.
type connSpent struct{ err error }

func (e connSpent) Error() string {
	if e.err == nil {
		return "prioq: connection closed after use"
	}
	return e.err.Error()
}

// spentCause is the error a connSpent carries (err itself for any other).
func spentCause(err error) error {
	var s connSpent
	if errors.As(err, &s) {
		return s.err
	}
	return err
}

// pushed handles what the node sends unasked: an announcement, or a
// subscription it dropped because the channel's slot moved (ErrSlotMoved).
func (s *Subscription) pushed(r []string) error {
	if len(r) < 2 {
		return nil
	}
	switch r[0] {
	case "smessage":
		if len(r) == 3 {
			s.handle(r[1], r[2])
		}
	case "sunsubscribe":
		// Every SUNSUBSCRIBE of ours reads its own reply (send), so this
		// one is the node's: the slot moved.
		return ErrSlotMoved
	}
	return nil
}

// send sends one command and reads until its reply, handing what the node
// pushed meanwhile to pushed. An error reply is this command's (nothing
// pushed is an error).
func (s *Subscription) send(ctx context.Context, cmd, ch string) error {
	wctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	reply := strings.ToLower(cmd)
	if cmd == "PING" {
		reply = "pong" // ["pong", ""] while subscribed
	}
	var r []string
	err := s.conn.EncodeDecode(wctx, []string{cmd, ch}, &r)
	for {
		if err != nil {
			return err
		}
		if len(r) >= 2 && r[0] == reply && (cmd == "PING" || r[1] == ch) {
			return nil
		}
		if err := s.pushed(r); err != nil {
			return err
		}
		r = nil
		err = s.conn.EncodeDecode(wctx, nil, &r)
	}
}

// Subscribe subscribes to channel ch (SSUBSCRIBE). A refusal for the user's
// permissions is an error IsNoPerm tells; MOVED (not this node's slot any
// more) is ErrSlotMoved.
func (s *Subscription) Subscribe(ctx context.Context, ch string) error {
	err := s.send(ctx, "SSUBSCRIBE", ch)
	if err != nil && isRedirect(err) {
		return ErrSlotMoved
	}
	return err
}

// Unsubscribe unsubscribes from ch (SUNSUBSCRIBE).
func (s *Subscription) Unsubscribe(ctx context.Context, ch string) error {
	return s.send(ctx, "SUNSUBSCRIBE", ch)
}

// Ping checks the connection: one that died silently fails it within the
// Subscription's timeout.
func (s *Subscription) Ping(ctx context.Context) error { return s.send(ctx, "PING", "") }

// Read reads what the node pushes, until ctx ends (then ctx's error, the
// connection still usable when that is a deadline), and hands an
// announcement to the handler.
func (s *Subscription) Read(ctx context.Context) error {
	var r []string
	if err := s.conn.EncodeDecode(ctx, nil, &r); err != nil {
		return err
	}
	return s.pushed(r)
}

// IsNoPerm reports whether err is an ACL refusal (NOPERM): of a channel, or
// of the command itself.
func IsNoPerm(err error) bool { return isNoPerm(err) }

func isNoPerm(err error) bool {
	return isReply(err) && strings.HasPrefix(ReplyText(err), "NOPERM")
}

// ReplyText is the text of the Redis error reply err wraps ("" if none).
func ReplyText(err error) string {
	var se resp3.SimpleError
	if errors.As(err, &se) {
		return se.Error()
	}
	var be resp3.BlobError
	if errors.As(err, &be) {
		return be.Error()
	}
	return ""
}
