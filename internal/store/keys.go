package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mediocregopher/radix/v4"
)

// keys.go is the only place key names are built, and the one description of
// the key layout; doc.go and the scripts' headers point here.
//
// Every key of queue Q starts with prioq:{Q}:, so the queue lives in one
// Redis Cluster slot (its hash tag is its name) and every multi-key command
// and script prioq sends is legal on a cluster. Scripts get every key they
// touch in KEYS, but some they build from a declared key's name, so in its
// slot: a Range priority's list (prio:P below), whose name a take learns
// only as it pops P from an index, the lanes a filled index names, and the
// keys of a group. A script that may touch such a key is fenced (the fence
// key below): it never runs while its slot is half moved between nodes.
//
//	prioq:{Q}:meta      HASH    layout, mode, format: written by Open when missing
//	                            (and put back by consumers if a restart lost it)
//	prioq:{Q}:lane:N    LIST    Levels: envelopes of priority N, oldest first
//	prioq:{Q}:lane:N    ZSET    Range: segment N, the index of its priorities that have
//	                            messages waiting: member the priority P (decimal), score -P
//	prioq:{Q}:prio:P    LIST    Range: envelopes of priority P, oldest first. Its name
//	                            is built by the scripts (lua/inc/lanes.lua plist_key) from a lane
//	                            key and P, the one name they build: a take learns P as it
//	                            pops it from the index. A name in an index may outlive its
//	                            list (its push refused: a key P of the wrong type); a take
//	                            drops it. Only P as strconv writes it names a list
//	                            (lua/inc/index.lua index_prio): a take moves any other member ("x",
//	                            "007", an entry of the earlier form) to the dead letters,
//	                            alone, and every reader passes it over
//	                            Range queues stored before format 4 (meta "format" 2 or 3)
//	                            have no such lists: their segment N holds the messages,
//	                            member seq‖Envelope, score -priority (Layout.seqMembers)
//	prioq:{Q}:filled    ZSET    a queue of one shard and more than 8 lanes, Levels in
//	                            AtLeastOnce mode or Range of format 4 (format 5): names the
//	                            lanes holding messages, member N, score -N, and "*" (score
//	                            -inf) once a take checked that it names them all. Every push
//	                            into lane N names it in the same atomic step (lua/inc/lanes.lua
//	                            name_lane, the enqueue's MULTI); a take reads the best name
//	                            and pops that lane alone, dropping names of empty lanes.
//	                            A name may outlive its lane's messages (takes by weight
//	                            pop without the index), never the other way round but
//	                            when the key is lost or of the wrong type: a take that
//	                            finds it so, or without "*", pops over every lane and
//	                            names what it finds
//	prioq:{Q}:lane:N:g:G  LIST  Levels: the messages of group G at level N, oldest first;
//	prioq:{Q}:prio:P:g:G  LIST  Range: those at priority P. While it holds any, the list
//	                            beside it (lane:N, prio:P) holds one marker of the group
//	                            ("\x00" and G, never an envelope) in the place of a message,
//	                            or the marker is parked (gpark). Names built by the
//	                            scripts (lua/inc/grouppush.lua group_push) from the list's name
//	prioq:{Q}:gready    HASH    group -> messages waiting in its lists
//	prioq:{Q}:gleases:G SET     the lease tokens of group G's messages in flight: added by
//	                            take.lua, removed when a lease ends (ack, retry, dead
//	                            letter, expiry, release); its size is what the group's
//	                            concurrency limit bounds. Built by the scripts from a
//	                            lane key, and by Go (KeySet.groupLeases)
//	prioq:{Q}:gflight   ZSET    group -> the latest lease deadline (ms) a take gave one of
//	                            its messages: the groups that may have messages in flight,
//	                            which Queue.Groups counts (their gleases:G, not the
//	                            in-flight records and their payloads). The sweep drops a
//	                            group once that time passed and none of its leases is
//	                            left, or moves the time to its latest lease's (Extend)
//	prioq:{Q}:gpark     HASH    group -> "N|score N|score ...": its markers taken out of
//	                            lanes N (score: Range) at its concurrency limit, put back
//	                            when one of its leases ends, or at its rate limit, put
//	                            back by a promoter at its time in gdue
//	prioq:{Q}:glimits   HASH    group -> its limits, "K R P": concurrency K, at most R
//	                            takes per P ms (rates.go); "" -> every group's
//	prioq:{Q}:glog:G    ZSET    lease token -> take time (µs, server clock): group G's
//	                            takes of its rate window (a sliding-window log, trimmed
//	                            by each take, expiring P ms after the newest)
//	prioq:{Q}:gdue      ZSET    group -> when (ms) a group parked at its rate limit
//	                            comes back; promote.lua puts its markers back then
//	prioq:{Q}:hist      ZSET    "t|ready|delayed|in flight|dead|enqueued|acked|retried|dead
//	                            lettered" -> t: one reading of the queue's figures a minute
//	                            (t: the minute, unix ms), a day of them at most, for charts
//	                            (history.go); written by consumers and the dashboard
//	prioq:{Q}:rate      STRING  the queue's rate limit, "0 R P" (rates.go)
//	prioq:{Q}:rlog      ZSET    the queue's log of takes, as glog:G
//	prioq:{Q}:seq       STRING  counter: FIFO order in segments and among equal due times
//	prioq:{Q}:delayed   ZSET    seq‖id -> due time (unix ms, server clock)
//	prioq:{Q}:dstore    HASH    id -> "lane|score|" seq‖envelope of a delayed message
//	prioq:{Q}:sched     LIST    ≤ 1 marker: an earlier due time was scheduled (for a
//	                            shard of a queue of several: a ZSET, one member "d",
//	                            which consumers that promote watch with the wake-up)
//	prioq:{Q}:ids       SET     caller-given ids of live messages (idempotency)
//	prioq:{Q}:uniq:K    STRING  the server's ms when unique key K's window opened (an
//	                            enqueue with UniqueFor/UniqueKey), PX the window: no
//	                            other enqueue with K is stored until it ends
//	prioq:{Q}:deb:K     STRING  the delayed-set member (seq‖id) of debounce key K's pending
//	                            message, PX its window and an hour: enqueues with K fold
//	                            into it while that member waits (lua/inc/once.lua)
//	prioq:{Q}:schedules HASH    schedule name -> "rev|last|" JSON record (schedules.go):
//	                            rev counts its upserts, last is its last tick fired
//	                            (unix ms, "" none); the record holds its spec and what
//	                            each tick enqueues. A queue of several shards keeps its
//	                            schedules in shard 0's keys only
//	prioq:{Q}:sdue      ZSET    schedule name -> its next fire time (unix ms, server
//	                            clock): promote.lua reads the head beside the delayed
//	                            set's, and schedfire.lua moves it, compare-and-set
//	prioq:{Q}:counts    HASH    enqueued, acked, retried, dead_lettered, expired, cancelled: totals
//	                            since the queue began, for rates (stats.go)
//	prioq:{Q}:wake      ZSET    member "w": ready work may exist (AtLeastOnce, and
//	                            AtMostOnce with several shards); its score is minus the
//	                            best priority made ready since a consumer last popped it
//	                            (ZADD LT; -inf: not known). Its name is also a shard
//	                            channel: when the member is added, the write publishes
//	                            "r" on it (SPUBLISH), and "d" when an earlier due time
//	                            is scheduled, "c" when Queue.Cancel ended a delivery in
//	                            flight, for MultiConsumers (internal/consume/multi.go)
//	prioq:{Q}:paused    LIST/ZSET  one sentinel while paused (AtLeastOnce; a lane's type)
//	prioq:{Q}:leases    ZSET    lease token -> lease deadline (ms) (AtLeastOnce)
//	prioq:{Q}:inflight  HASH    lease token -> "lane|score|lane entry" (AtLeastOnce)
//	prioq:{Q}:cancelled ZSET    lease token -> when (ms, server clock) Queue.Cancel ended
//	                            that delivery in flight (cancelrun.lua): its holder's
//	                            renewer (renew.lua) reads the mark and cancels the
//	                            handler. Marks older than an hour are trimmed by each
//	                            cancel, and the key expires an hour after the last one
//	prioq:{Q}:dead      LIST    "lane|score|died|len|reason" + envelope: dead letters,
//	                            and stored records that did not parse (lane "-", no
//	                            score: kept whole, never requeued) (AtLeastOnce)
//	prioq:{Q}:done      ZSET    id -> when it finished (unix ms, server clock): the
//	                            retained finished messages (Config.Retain, or an ack
//	                            with a result), trimmed by age and count by each write
//	                            (lua/finish.lua)
//	prioq:{Q}:res       HASH    id -> "outcome|attempts|enqueued|finished|until|errlen|"
//	                            error result: a finished message's record (retain.go);
//	                            readers ignore one past its until (ms)
//	prioq:{Q}:reply:ID  LIST    "f" pushed when message ID finishes with a record, PX a
//	                            minute: what WaitResult blocks on (BLPOP)
//	prioq:{Q}:prog:T    STRING  "percent|unix ms|note": the progress the delivery of
//	                            lease token T reported (progress.lua), PX its lease
//	                            deadline plus an hour; deleted by its ack
//	prioq:{Q}:poke:C    ZSET    (a shard of a queue of several) member "p", briefly:
//	                            consumer C (a random id) began a fetch while its
//	                            wait on the shard watched only the sched set and
//	                            this key (internal/consume/waiter.go); expires after a minute
//	prioq:{Q}:fence     none    never written: every script that may touch a key it
//	                            does not declare (the group lists, gleases:G, glog:G,
//	                            prio:P, the lanes a filled index names) declares this
//	                            key last (shard.eval, lua.go's script), so a cluster
//	                            node refuses it (TRYAGAIN) while the slot is migrating
//	                            or importing: it runs only when the whole slot is on
//	                            one node (DESIGN.md §5)
//
// A queue of several shards (Config.Shards) keeps prioq:{Q}:meta (field
// "shards" says how many) and puts every other key above, for shard i, under
// prioq/i:{Q/k}: instead of prioq:{Q}: (shardKeySet, shardTags). A queue of
// one shard is the layout above, byte for byte.
//
// The envelope is a versioned binary record (Envelope.go); a lease token is
// the take's server time, the message's place in the take and a suffix: the
// taking process's holder id, "-", and random digits (lua/take.lua; take.go
// takeSuffix, LeaseHolder).

// KeySet holds a queue's key names: each field is the key of its name above.
type KeySet struct {
	meta, ids, seq, delayed, dstore, sched, counts string
	schedules, sdue                                string
	filled                                         string
	gready, gpark, glimits, gdue, gflight          string
	rate, rlog                                     string
	hist                                           string
	done, res                                      string
	wake, paused, leases, inflight, dead           string
	cancelled                                      string
	fence                                          string   // never exists (see the layout above)
	lanes                                          []string // lane 0 (lowest priority) first
	prefix                                         string   // what every key but meta starts with

	// Built once per queue, read-only afterwards: every slice has cap == len,
	// so an append by a caller copies instead of writing into it.
	highFirst []string       // lanes in serving order, highest first
	laneIndex map[string]int // lane key -> lane

	// The KEYS of each script that takes every lane, in the order the
	// script's header documents (lua/*.lua).
	promoteKeys []string // delayed, dstore, seq, wake, dead, lanes...
	purgeKeys   []string // ids, delayed, dstore, sched, lanes...
	cancelKeys  []string // ids, delayed, dstore, lanes highest first...
	failKeys    []string // leases, inflight, delayed, dstore, dead, wake, sched, seq, lanes...
	sweepKeys   []string // leases, inflight, dead, wake, paused, lanes...
	releaseKeys []string // leases, inflight, dead, wake, lanes...
	deadKeys    []string // dead, ids, seq, wake, lanes...
}

// Every key of a queue starts with keyPrefix, the name, and keyTagEnd: the
// name is the Cluster hash tag, so a queue's keys share one slot.
const (
	keyPrefix = "prioq:{"
	keyTagEnd = "}:"
	metaName  = "meta"
)

// MetaKeyPattern matches the meta key of every queue (written by Open): tools
// find the queues of a Redis by SCAN with this MATCH pattern (never KEYS) and
// QueueOfMetaKey.
const MetaKeyPattern = keyPrefix + "*" + keyTagEnd + metaName

// QueueOfMetaKey returns the name of the queue whose meta key is key, and
// false when key is not a queue's meta key.
func QueueOfMetaKey(key string) (string, bool) {
	name, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return "", false
	}
	name, ok = strings.CutSuffix(name, keyTagEnd+metaName)
	if !ok || validateName(name) != nil {
		return "", false
	}
	return name, true
}

// newKeySet is the key set of a queue of one shard: the queue's name is its
// hash tag.
func newKeySet(name string, lanes int) KeySet {
	p := keyPrefix + name + keyTagEnd
	return keysAt(p, p+metaName, lanes)
}

// shardKeySet is the key set of shard i of a queue of several (see
// shardTags): every key of a one-shard queue, under the prefix
// prioq/i:{tag}:, which no queue's own keys (prioq:{…}:) can take. The meta
// key stays the queue's, prioq:{name}:meta, in the slot of the name.
func shardKeySet(name string, i int, tag string, lanes int) KeySet {
	p := "prioq/" + strconv.Itoa(i) + ":{" + tag + keyTagEnd
	return keysAt(p, keyPrefix+name+keyTagEnd+metaName, lanes)
}

// shardSlots is how many Redis Cluster hash slots there are.
const shardSlots = 16384

// shardTags chooses the hash tags of the n shards of queue name: shard i's tag
// is name/k for the smallest k whose slot lies near the middle of the i-th of
// n equal windows of the 16,384 slots. A cluster whose primaries hold equal
// runs of slots in order (what redis-cli --cluster create makes) then holds
// ⌊n/P⌋ or ⌈n/P⌉ shards on each of its P primaries. The tags depend on the
// name and n alone, so every process finds the same ones. ('/' and the
// number after the last one tell the tags of different queues apart.)
func shardTags(name string, n int) []string {
	tags := make([]string, n)
	for i := range tags {
		lo, hi := i*shardSlots/n, (i+1)*shardSlots/n
		mid, half := (lo+hi)/2, max((hi-lo)/4, 1)
		for k := 0; ; k++ {
			t := name + "/" + strconv.Itoa(k)
			if s := int(radix.ClusterSlot([]byte(t))); s >= mid-half && s < mid+half {
				tags[i] = t
				break
			}
		}
	}
	return tags
}

// keysAt builds the key names under prefix p.
func keysAt(p, meta string, lanes int) KeySet {
	k := KeySet{
		meta:     meta,
		ids:      p + "ids",
		seq:      p + "seq",
		delayed:  p + "delayed",
		dstore:   p + "dstore",
		sched:    p + "sched",
		wake:     p + "wake",
		paused:   p + "paused",
		leases:   p + "leases",
		inflight: p + "inflight",
		// Cancels of messages in flight (Queue.Cancel, cancelrun.lua).
		cancelled: p + "cancelled",
		dead:      p + deadName,
		counts:    p + "counts",
		// Schedules (schedules.go).
		schedules: p + schedulesName,
		sdue:      p + scheduleDueName,
		fence:     p + "fence",
		filled:    p + filledName,
		// Groups (groups.go).
		gready:  p + groupReadyName,
		gpark:   p + groupParkName,
		glimits: p + groupLimitsName,
		gdue:    p + groupDueName,
		gflight: p + groupFlightName,
		// Rate limits (rates.go).
		rate: p + queueRateName,
		rlog: p + queueLogName,
		hist: p + "hist",
		// Finished messages (retain.go).
		done:   p + "done",
		res:    p + "res",
		lanes:  make([]string, lanes),
		prefix: p,
	}
	k.laneIndex = make(map[string]int, lanes)
	for i := range k.lanes {
		k.lanes[i] = p + "lane:" + strconv.Itoa(i)
		k.laneIndex[k.lanes[i]] = i
	}
	for i := range k.lanes {
		k.highFirst = append(k.highFirst, k.lanes[len(k.lanes)-1-i])
	}
	k.highFirst = clip(k.highFirst)
	withLanes := func(lanes []string, fixed ...string) []string { return clip(append(fixed, lanes...)) }
	k.promoteKeys = withLanes(k.lanes, k.delayed, k.dstore, k.seq, k.wake, k.dead)
	k.purgeKeys = withLanes(k.lanes, k.ids, k.delayed, k.dstore, k.sched)
	k.cancelKeys = withLanes(k.highFirst, k.ids, k.delayed, k.dstore)
	k.failKeys = withLanes(k.lanes, k.leases, k.inflight, k.delayed, k.dstore, k.dead, k.wake, k.sched, k.seq)
	k.sweepKeys = withLanes(k.lanes, k.leases, k.inflight, k.dead, k.wake, k.paused)
	k.releaseKeys = withLanes(k.lanes, k.leases, k.inflight, k.dead, k.wake)
	k.deadKeys = withLanes(k.lanes, k.dead, k.ids, k.seq, k.wake)
	return k
}

// groupLeases is the key of the lease tokens of group g in flight.
func (k KeySet) groupLeases(g string) string { return k.prefix + groupLeasesTag + g }

// poke is consumer id's poke key (internal/consume/waiter.go), a shard's.
func (k KeySet) poke(id string) string { return k.prefix + "poke:" + id }

// reply is the wake-up list of message id's finish, prog the progress of
// the delivery of lease token tok (retain.go).
func (k KeySet) reply(id string) string { return k.prefix + "reply:" + id }
func (k KeySet) prog(tok string) string { return k.prefix + "prog:" + tok }

// Prog is prog, for tests.
func (k *KeySet) Prog(tok string) string { return k.prog(tok) }

// unique and debounce are the keys of a caller's unique key and debounce
// key (send.go onceField).
func (k KeySet) unique(key string) string   { return k.prefix + "uniq:" + key }
func (k KeySet) debounce(key string) string { return k.prefix + "deb:" + key }

// prioList is the key of the list of priority p (Range, format 4); the
// scripts build the same name from a lane key (lua/inc/lanes.lua plist_key).
func (k KeySet) prioList(p int64) string {
	return k.prefix + prioListTag + strconv.FormatInt(p, 10)
}

// slotKey is a key of the shard's own hash slot (the meta key is not, for a
// queue of several shards): calls that must reach the shard's node, such as
// a WAIT on the connection of a write, are routed by it.
func (k KeySet) slotKey() string { return k.seq }

func clip(s []string) []string { return s[:len(s):len(s)] }

// all lists every key of the queue, for Purge-style operations and tests.
func (k KeySet) all() []string {
	return append([]string{k.meta, k.ids, k.seq, k.delayed, k.dstore, k.sched,
		k.wake, k.paused, k.leases, k.inflight, k.dead, k.counts, k.filled,
		k.gready, k.gpark, k.glimits, k.gdue, k.gflight, k.rate, k.rlog, k.hist,
		k.schedules, k.sdue, k.done, k.res, k.cancelled}, k.lanes...)
}

// maxNameLen bounds queue names; with the fixed parts a key stays short.
const maxNameLen = 100

func validateName(name string) error {
	if len(name) == 0 || len(name) > maxNameLen {
		return fmt.Errorf("%w: %q has length %d (want 1..%d)", ErrInvalidName, name, len(name), maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		// Braces would change the cluster hash tag; spaces and control bytes
		// make keys painful to handle by hand.
		if c < 0x21 || c > 0x7e || c == '{' || c == '}' {
			return fmt.Errorf("%w: %q has byte %#x at %d", ErrInvalidName, name, c, i)
		}
	}
	return nil
}
