package prioq

import "github.com/prioq/prioq/internal/store"

// Every error prioq returns either is one of these sentinels or wraps one
// (or wraps a Redis / network error), so errors.Is works on all of them.
// Each is the value internal/store declares (the layers below return them
// too), under the name and with the documentation of the public API.
var (
	// ErrInvalidPriority is returned when a priority lies outside the queue's layout.
	ErrInvalidPriority = store.ErrInvalidPriority
	// ErrInvalidLayout is returned by Open for a layout that cannot be built
	// (no levels, more than 64 levels or segments, lo > hi, a bound beyond ±2^53).
	ErrInvalidLayout = store.ErrInvalidLayout
	// ErrInvalidName is returned by Open for an empty, too long or unsafe queue name.
	ErrInvalidName = store.ErrInvalidName
	// ErrInvalidID is returned for an empty, too long or non-printable message
	// id, and by the ID option for an id of the form prioq generates.
	ErrInvalidID = store.ErrInvalidID
	// ErrEmptyPayload is returned when a message has no payload.
	ErrEmptyPayload = store.ErrEmptyPayload
	// ErrPayloadTooLarge is returned when a payload exceeds Config.MaxPayload.
	ErrPayloadTooLarge = store.ErrPayloadTooLarge
	// ErrRegistry wraps a failure of a consumer's heartbeat in the worker
	// registry (Workers), reported to OnError once: the consumer works on,
	// unlisted. ConsumerConfig.NoHeartbeat turns the heartbeat off.
	ErrRegistry = store.ErrRegistry
	// ErrInvalidOption is returned for an option that makes no sense (a negative
	// delay, a batch size below 1, ...).
	ErrInvalidOption = store.ErrInvalidOption
	// ErrInvalidHeader is returned for headers beyond MaxHeaders,
	// MaxHeaderKey or MaxHeaderBytes, or with an empty key.
	ErrInvalidHeader = store.ErrInvalidHeader
	// ErrConfigMismatch is returned by Open when the queue already exists in Redis
	// with another layout or delivery mode.
	ErrConfigMismatch = store.ErrConfigMismatch
	// ErrUnsafeEviction is returned by Open when the server's maxmemory-policy
	// (allkeys-*) may evict the queue's keys, and Config.AllowEviction is not set.
	ErrUnsafeEviction = store.ErrUnsafeEviction
	// ErrNotReplicated is returned, with Config.WaitReplicas set, by a write
	// that Redis made but that fewer replicas than asked confirmed within
	// Config.WaitTimeout. The write stays: an enqueue returning it stored its
	// message, an ack returning it acked. It may be lost if the primary fails
	// before the replicas catch up. Do not enqueue such a message again: that
	// stores a second copy, unless it was given an ID (the retry then reports
	// ErrDuplicate).
	ErrNotReplicated = store.ErrNotReplicated
	// ErrDuplicate is returned when a live message already has the given id.
	ErrDuplicate = store.ErrDuplicate
	// ErrNotFound is returned when no message has the given id: no waiting
	// (ready or delayed) one for Cancel and RunNow, none at all for Message.
	ErrNotFound = store.ErrNotFound
	// ErrCorrupt is returned when a stored envelope does not decode, and for
	// what cannot be done because a queue's key holds the wrong type (a lane a
	// dead letter would go back to, every lane of an AtMostOnce pop).
	ErrCorrupt = store.ErrCorrupt
	// ErrWrongMode is returned when an operation needs the other delivery mode
	// (for example Ack on an AtMostOnce message).
	ErrWrongMode = store.ErrWrongMode
	// ErrLeaseLost is returned by Ack, Retry and Extend when the message's lease
	// expired and the message was (or will be) delivered again: the caller no
	// longer owns it, and nothing was changed.
	ErrLeaseLost = store.ErrLeaseLost

	// ErrTooLate wraps what OnError gets of an AtMostOnce message dropped
	// because a consumer took it after its StartBy time.
	ErrTooLate = store.ErrTooLate
	// ErrClosed is returned by a Consumer after Close.
	ErrClosed = store.ErrClosed
	// ErrPoolTooSmall is returned by NewConsumer and NewMultiConsumer when the
	// client's pool cannot hold the consumer's blocking connections beside
	// those of its other consumers and one for every other call: started, the
	// consumers would hold every connection and starve enqueues and acks.
	ErrPoolTooSmall = store.ErrPoolTooSmall
	// ErrSkipRetry, wrapped in a handler's error, sends the message straight to
	// the dead-letter list.
	ErrSkipRetry = store.ErrSkipRetry
	// ErrLeaseExpired is the cause (context.Cause) of a handler context
	// cancelled because the message's lease ended: the message may already be
	// with another consumer.
	ErrLeaseExpired = store.ErrLeaseExpired
	// ErrCancelled is the cause (context.Cause) of a handler context
	// cancelled because Queue.Cancel ended the message's delivery, from any
	// process: the message is finished (not retried; AfterFinish gets
	// OutcomeCancelled), and Ack, Retry and Extend of it fail with
	// ErrLeaseLost.
	ErrCancelled = store.ErrCancelled
	// ErrHandlerTimeout is the cause (context.Cause) of a handler context
	// that ran for ConsumerConfig.HandlerTimeout; Run then retries the
	// message as after a handler error (the error it records wraps it).
	ErrHandlerTimeout = store.ErrHandlerTimeout
	// ErrUnsupportedServer is returned by Open when the server cannot run
	// prioq: it has no Lua scripting (EVAL and EVALSHA unknown or disabled,
	// as on a Valkey built without Lua, or a Garnet not told to run scripts).
	ErrUnsupportedServer = store.ErrUnsupportedServer
	// ErrInvalidSchedule is returned by Schedule for a spec that does not
	// parse, or has no tick within 30 years; it wraps ErrInvalidOption.
	ErrInvalidSchedule = store.ErrInvalidSchedule
	// ErrScript is returned when a prioq Lua script answers with something it
	// should never answer (a bug, or keys changed behind prioq's back).
	ErrScript = store.ErrScript
)
