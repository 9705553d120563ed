package store

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The values that cross the boundary between Go and the Lua scripts, named
// once here. luaConstants writes them (and the envelope's offsets) into the
// prelude of every script, so that the scripts use these names and cannot
// drift from the Go side; protocol_test.go checks a script reads an
// envelope the way DecodeEnvelope does.
const (
	// unknownLane is the lane field of a dead letter whose record no longer
	// said where it was (its routing did not parse): never requeued.
	unknownLane = "-"

	// seqLen is the size of the sequence number in front of a Range lane's
	// member and of a delayed member (8 bytes, big-endian).
	seqLen = 8

	// luaChunk is the most values one command gets from a script (Lua's
	// unpack stops near 8,000); even, so score/member pairs stay together.
	luaChunk = 1000

	// argKindLevels, argKindRange and argKindLists tell a script how lanes
	// hold messages: LISTs of envelopes (Levels), ZSETs of seq‖envelope
	// (Range queues of formats 2 and 3), or ZSET indexes of the priorities
	// waiting, each priority a LIST of envelopes (Range, format 4; keys.go).
	// argKindFilled and argKindListsFilled are Levels and Range of format 4
	// whose lanes are also named, while they hold messages, in the filled
	// index (format 5: a queue of one shard and more than filledLanes lanes;
	// Levels in AtLeastOnce mode only): scripts take them as KIND_LEVELS and
	// KIND_LISTS, and every push names its lane there (lua/inc/lanes.lua kind_of).
	argKindLevels      = "1"
	argKindRange       = "2"
	argKindLists       = "3"
	argKindFilled      = "4"
	argKindListsFilled = "5"

	// filledLanes is how many lanes a Levels queue has at most without the
	// filled index: up to it, a take's one multi-key pop over every lane
	// costs less than reading the index, and an enqueue pays no naming.
	filledLanes = 8

	// filledName is the filled index's key name after the prefix (keys.go);
	// scripts build it from a lane key, as they build a priority's list.
	filledName = "filled"

	// deadName is the dead-letter list's key name after the prefix
	// (keys.go): a take builds it to set aside an index member that names
	// no priority (lua/inc/take_aside.lua set_aside), group_unpark (lua/inc/park.lua) to set
	// aside a corrupt parked entry, both from a lane key.
	deadName = "dead"

	// filledWhole is the filled index's member that says it names every
	// lane holding messages (score -inf): only a take that checked every
	// lane writes it (lua/inc/take_popall.lua pop_filled).
	filledWhole = "*"

	// Groups (groups.go, keys.go): the names of a queue's group keys after
	// its prefix, and what a group's list key has after the list (a level's
	// lane, a Range priority's list) its marker is in. Scripts build them
	// from a lane key.
	groupReadyName  = "gready"
	groupLeasesTag  = "gleases:" // then the group: a SET of its lease tokens
	groupParkName   = "gpark"
	groupLimitsName = "glimits"
	groupListTag    = ":g:"
	groupFlightName = "gflight"

	// Rate limits (rates.go, keys.go): a group's log of takes (a ZSET per
	// group, after this tag), the groups parked at their rate limit until
	// their next message is due, the queue's limit and its log.
	groupLogTag   = "glog:"
	groupDueName  = "gdue"
	queueRateName = "rate"
	queueLogName  = "rlog"

	// Schedules (schedules.go, keys.go): the records and the next fire
	// times; promote.lua builds the second's name from a lane key.
	schedulesName   = "schedules"
	scheduleDueName = "sdue"

	// groupMark is the first byte of a group's marker in a list (the marker
	// is it and the group): an envelope starts with its version, never 0.
	groupMark = 0

	// prioListTag is what a priority's list key has in place of "lane:N"
	// (keys.go, Range of format 4); scripts build it from the lane key.
	prioListTag = "prio:"

	// argYes and argNo are a script's boolean arguments.
	argYes = "1"
	argNo  = "0"

	// argSharded is a script's arm flag for a shard of a queue of several:
	// arm the wake-up set (as argYes), and signal an earlier due time in the
	// sched key, a sorted set there (see keys.go).
	argSharded = "2"

	// wakeMember is the one member of the wake-up set: adding it wakes a
	// waiting AtLeastOnce consumer.
	wakeMember = "w"

	// announceReady and announceDue are the messages published on a
	// shard's channel (the wake-up key's name, SPUBLISH) when work is made
	// ready there and when an earlier due time is scheduled: what a
	// MultiConsumer (internal/consume/multi.go) listens to.
	announceReady   = "r"
	announceDue     = "d"
	announceResumed = "u" // Resume (queue.go): work that waited is ready again
	// announceCancelled: Queue.Cancel ended a delivery in flight
	// (cancelrun.lua): its holder's renewer looks at once.
	announceCancelled = "c"

	// schedMarker is the one element of the sched list: pushing it wakes
	// the promoters, because a message now comes due earlier.
	schedMarker = "1"

	// pauseMember marks a paused lane 0 (pause.lua).
	pauseMember = "p"

	// What fail.lua does with a message: retry it, move it to the dead
	// letters because it has no attempts left or the handler said so, or bury
	// it there because it cannot be decoded.
	failRetry = "retry"
	failDead  = "dead"
	failBury  = "bury"

	// replyPaused is take.lua's reply when the queue is paused.
	replyPaused = "paused"

	// replyLimited, then the milliseconds until the next message may be
	// taken, is take.lua's reply when the queue is at its rate limit.
	replyLimited = "limited"

	// The modes of a take (take.lua's ARGV[5], words separated by spaces):
	// the reply says the best priority left; claim the wake-up first; a
	// shard of a queue of several; KEYS[takeFirstLane] is the filled index.
	modeTop     = "top"
	modeClaim   = "claim"
	modeSharded = "sharded"
	modeFilled  = "filled"

	// takeFirstLane is the KEYS index (1-based) of a take's first lane key,
	// after the paused, leases, inflight and wake-up keys (takeFrom).
	takeFirstLane = 5

	// dueMember is the one member of the sched set of a shard of a queue of
	// several: an earlier due time was scheduled. A consumer's one blocking
	// wait per shard watches the wake-up set and, when the consumer
	// promotes, this set too, and wakes its promoter for it.
	dueMember = "d"

	// What dead.lua does: requeue dead letters, or purge them.
	deadRequeue = "requeue"
	deadPurge   = "purge"

	// takeManyLanes is how many lanes after the popped one make take.lua ask
	// the popped lane alone first whether work remains (one key), before the
	// rest (see remains in lua/inc/take_remains.lua): below it, one EXISTS over all is cheaper.
	takeManyLanes = 8

	// The fields of the counts hash: messages stored by enqueues, and acks.
	countEnqueued = "enqueued"
	countAcked    = "acked"

	// replyTTL is how long (ms) a finished message's wake-up list
	// (KeySet.reply) outlives its last push: WaitResult's window.
	replyTTLMs = 60000
	// replyMark is the element pushed on it.
	replyMark = "f"
	// countCancelled counts deliveries in flight ended by Queue.Cancel
	// (cancelrun.lua).
	countCancelled = "cancelled"
)

// fmtSeconds is d in seconds, as Redis takes a blocking command's timeout.
func fmtSeconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// luaConstants is every constant above, and the envelope's offsets as
// 1-based Lua string positions, as Lua source: a local per constant. The
// scripts themselves get them as literals (luaLiterals, lua.go), not as
// locals: a literal costs a script nothing per call.
func luaConstants() string {
	var b strings.Builder
	b.WriteString("-- Generated by protocol.go: the values shared with Go.\n")
	for _, c := range luaConstantList() {
		fmt.Fprintf(&b, "local %s = %s\n", c.name, c.lit)
	}
	return b.String()
}

// luaConstant is a constant's name in the scripts and its Lua literal.
type luaConstant struct{ name, lit string }

// luaConstantList is every constant the scripts share with Go, in order.
func luaConstantList() []luaConstant {
	var out []luaConstant
	num := func(name string, v int) { out = append(out, luaConstant{name, strconv.Itoa(v)}) }
	str := func(name, v string) { out = append(out, luaConstant{name, luaQuote(v)}) }
	num("ENV_FLAGS", envOffFlags+1)
	num("ENV_ATTEMPTS", envOffAttempt+1)
	num("ENV_IDLEN", envOffIDLen+1)
	num("ENV_ID", envHeaderLen+1)
	num("FLAG_CALLER_ID", flagCallerID)
	num("FLAG_HEADERS", flagHeaders)
	str("START_BY", StartByHeader)
	num("SEQ_LEN", seqLen)
	num("ENV_V1", envVersion)
	num("ENV_V2", envVersionHdr)
	// 2^53: the seq counter and scores stay exact in Lua's doubles.
	num("MAX_SEQ", 1<<53)
	str("UNKNOWN_LANE", unknownLane)
	num("CHUNK", luaChunk)
	num("MANY_LANES", takeManyLanes)
	num("KIND_LEVELS", mustAtoi(argKindLevels))
	num("KIND_RANGE", mustAtoi(argKindRange))
	num("KIND_LISTS", mustAtoi(argKindLists))
	num("KIND_FILLED", mustAtoi(argKindFilled))
	num("KIND_LISTS_FILLED", mustAtoi(argKindListsFilled))
	str("FILLED_KEY", filledName)
	str("DEAD_KEY", deadName)
	str("FILLED_WHOLE", filledWhole)
	str("G_READY", groupReadyName)
	str("G_LEASES", groupLeasesTag)
	str("G_PARK", groupParkName)
	str("G_LIMITS", groupLimitsName)
	str("G_LIST", groupListTag)
	str("G_LOG", groupLogTag)
	str("G_DUE", groupDueName)
	str("G_FLIGHT", groupFlightName)
	str("Q_RATE", queueRateName)
	str("Q_LOG", queueLogName)
	str("S_DUE", scheduleDueName)
	str("G_MARK", string([]byte{groupMark}))
	num("ENV_V3", envVersionGrp)
	str("PRIO_LIST", prioListTag)
	str("YES", argYes)
	str("NO", argNo)
	str("SHARDED", argSharded)
	str("WAKE", wakeMember)
	str("ANNOUNCE_READY", announceReady)
	str("ANNOUNCE_DUE", announceDue)
	str("ANNOUNCE_CANCELLED", announceCancelled)
	str("SCHED", schedMarker)
	str("PAUSE", pauseMember)
	str("FAIL_RETRY", failRetry)
	str("FAIL_DEAD", failDead)
	str("FAIL_BURY", failBury)
	str("REPLY_PAUSED", replyPaused)
	str("REPLY_LIMITED", replyLimited)
	str("MODE_TOP", modeTop)
	str("MODE_CLAIM", modeClaim)
	str("MODE_SHARDED", modeSharded)
	str("MODE_FILLED", modeFilled)
	num("TAKE_FIRST", takeFirstLane)
	str("DUE", dueMember)
	str("DEAD_REQUEUE", deadRequeue)
	str("DEAD_PURGE", deadPurge)
	str("COUNT_ENQUEUED", countEnqueued)
	str("COUNT_ACKED", countAcked)
	num("REPLY_TTL_MS", replyTTLMs)
	str("REPLY_MARK", replyMark)
	str("COUNT_CANCELLED", countCancelled)
	return out
}

// luaQuote is s as a Lua string literal: printable ASCII but quotes and
// backslashes as they are, every other byte as a decimal escape.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= ' ' && c <= '~' && c != '\'' && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\%03d", c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func mustAtoi(s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		panic("prioq: protocol constant " + s + " is not a number")
	}
	return n
}

func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

// leaseMs is d in whole milliseconds, rounded up (a lease or a delay is never
// shorter than asked), and at least 0.
func leaseMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
