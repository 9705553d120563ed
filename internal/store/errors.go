package store

import (
	"errors"
	"fmt"
)

// The sentinels of every error prioq returns, declared here so that every
// layer (store, the consumer side, the root) returns the same values; the
// root re-exports each under its name (prioq.ErrX = store.ErrX), with the
// documentation users read, so errors.Is works across. Texts keep the
// "prioq:" prefix: these are the root's errors.
var (
	// ErrInvalidPriority is returned when a priority lies outside the queue's layout.
	ErrInvalidPriority = errors.New("prioq: invalid priority")
	// ErrInvalidLayout is returned by Open for a layout that cannot be built
	// (no levels, more than 64 levels or segments, lo > hi, a bound beyond ±2^53).
	ErrInvalidLayout = errors.New("prioq: invalid layout")
	// ErrInvalidName is returned by Open for an empty, too long or unsafe queue name.
	ErrInvalidName = errors.New("prioq: invalid queue name")
	// ErrInvalidID is returned for an empty, too long or non-printable message
	// id, and by the ID option for an id of the form prioq generates.
	ErrInvalidID = errors.New("prioq: invalid message id")
	// ErrEmptyPayload is returned when a message has no payload.
	ErrEmptyPayload = errors.New("prioq: empty payload")
	// ErrPayloadTooLarge is returned when a payload exceeds Config.MaxPayload.
	ErrPayloadTooLarge = errors.New("prioq: payload too large")
	// ErrRegistry wraps a failure of a consumer's heartbeat in the worker
	// registry, reported to OnError: the consumer works on, unlisted.
	ErrRegistry = errors.New("prioq: worker registry")
	// ErrInvalidOption is returned for an option that makes no sense (a negative
	// delay, a batch size below 1, ...).
	ErrInvalidOption = errors.New("prioq: invalid option")
	// ErrInvalidSchedule is returned for a schedule spec that does not
	// parse, or has no tick within 30 years; it wraps ErrInvalidOption.
	ErrInvalidSchedule = fmt.Errorf("%w: schedule spec", ErrInvalidOption)
	// ErrInvalidHeader is returned for headers beyond MaxHeaders,
	// MaxHeaderKey or MaxHeaderBytes, or with an empty key.
	ErrInvalidHeader = errors.New("prioq: invalid header")
	// ErrConfigMismatch is returned by Open when the queue already exists in Redis
	// with another layout or delivery mode.
	ErrConfigMismatch = errors.New("prioq: queue exists with a different configuration")
	// ErrUnsafeEviction is returned by Open when the server's maxmemory-policy
	// (allkeys-*) may evict the queue's keys, and Config.AllowEviction is not set.
	ErrUnsafeEviction = errors.New("prioq: the server may evict the queue's keys")
	// ErrNotReplicated is returned, with Config.WaitReplicas set, by a write
	// that Redis made but that fewer replicas than asked confirmed within
	// Config.WaitTimeout. The write stays: an enqueue returning it stored its
	// message, an ack returning it acked. It may be lost if the primary fails
	// before the replicas catch up. Do not enqueue such a message again: that
	// stores a second copy, unless it was given an ID (the retry then reports
	// ErrDuplicate).
	ErrNotReplicated = errors.New("prioq: write not confirmed by enough replicas")
	// ErrDuplicate is returned when a live message already has the given id.
	ErrDuplicate = errors.New("prioq: duplicate id")
	// ErrNotFound is returned when no waiting (ready or delayed) message has the given id.
	ErrNotFound = errors.New("prioq: message not found")
	// ErrCorrupt is returned when a stored envelope does not decode, and for
	// what cannot be done because a queue's key holds the wrong type (a lane a
	// dead letter would go back to, every lane of an AtMostOnce pop).
	ErrCorrupt = errors.New("prioq: corrupt message")
	// ErrWrongMode is returned when an operation needs the other delivery mode
	// (for example Ack on an AtMostOnce message).
	ErrWrongMode = errors.New("prioq: operation not supported in this delivery mode")
	// ErrLeaseLost is returned by Ack, Retry and Extend when the message's lease
	// expired and the message was (or will be) delivered again: the caller no
	// longer owns it, and nothing was changed.
	ErrLeaseLost = errors.New("prioq: lease lost")

	// ErrTooLate wraps the report of an AtMostOnce message dropped because
	// it was taken after its start-by time (StartByHeader).
	ErrTooLate = errors.New("prioq: not started in time")
	// ErrClosed is returned by a Consumer after Close.
	ErrClosed = errors.New("prioq: consumer closed")
	// ErrPoolTooSmall is returned by NewConsumer and NewMultiConsumer when the
	// client's pool cannot hold the consumer's blocking connections beside
	// those of its other consumers and one for every other call: started, the
	// consumers would hold every connection and starve enqueues and acks.
	ErrPoolTooSmall = errors.New("prioq: pool too small for the consumers' blocking connections")
	// ErrSkipRetry, wrapped in a handler's error, sends the message straight to
	// the dead-letter list.
	ErrSkipRetry = errors.New("prioq: do not retry")
	// ErrLeaseExpired is the cause (context.Cause) of a handler context
	// cancelled because the message's lease ended: the message may already be
	// with another consumer.
	ErrLeaseExpired = errors.New("prioq: lease expired")
	// ErrCancelled: see the root's.
	ErrCancelled = errors.New("prioq: message cancelled")
	// ErrHandlerTimeout: see the root's.
	ErrHandlerTimeout = errors.New("prioq: handler timeout")
	// ErrUnsupportedServer is returned by Open when the server cannot run
	// prioq: it has no Lua scripting (EVAL and EVALSHA unknown or disabled,
	// as on a Valkey built without Lua, or a Garnet not told to run scripts).
	ErrUnsupportedServer = errors.New("prioq: unsupported server")
	// ErrScript is returned when a prioq Lua script answers with something it
	// should never answer (a bug, or keys changed behind prioq's back).
	ErrScript = errors.New("prioq: unexpected script reply")
)
