-- take.lua: pop the highest-priority ready messages and lease them.
--
-- include: take_first, take_gend, take_lease, take_more, take_rate, take_state, take_unleased
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:paused    LIST/ZSET
-- KEYS[2]   prioq:{Q}:leases    ZSET
-- KEYS[3]   prioq:{Q}:inflight  HASH
-- KEYS[4]   prioq:{Q}:wake      ZSET
-- KEYS[5..] (TAKE_FIRST) lane keys in the order to serve them (highest
--           first, or weighted); with MODE_FILLED, the filled index instead
-- ARGV[1]   lease (ms): the deadline is the server's now plus this; 0: no
--           lease (AtMostOnce, a queue of several shards)
-- ARGV[2]   how many to take at most (Go caps it at MaxBatch)
-- ARGV[3]   KIND_LEVELS, KIND_RANGE, KIND_LISTS, KIND_FILLED or
--           KIND_LISTS_FILLED
-- ARGV[4]   lease token suffix, random per call (take.go takeSuffix: the
--           process's holder id first, which readers of the leases show)
-- ARGV[5]   modes, words separated by spaces ('' for none):
--           MODE_TOP      the reply says the priority of the best message
--                         left in these lanes: a consumer of a queue of
--                         several shards picks its next shard by it
--           MODE_CLAIM    claim the wake-up first (remove its member), as
--                         a consumer that pops it before taking does: a
--                         MultiConsumer takes without waiting on the key,
--                         and the member must go, or no later arm_wake
--                         would announce new work
--           MODE_SHARDED  a shard of a queue of several: how a take that
--                         parks a group at its rate wakes the promoters
--           MODE_FILLED   KEYS[5] is the filled index, which names the
--                         lanes holding messages (ARGV[9]: how many lanes):
--                         the take builds the lane keys it needs from it,
--                         so what it costs does not grow with the lanes
--                         (Go sends it only highest first, without ARGV[6],
--                         ARGV[7] nor MODE_TOP)
-- ARGV[6]   pop from the first this many lanes only (0: all): a consumer of
--           a queue of several shards takes nothing below the best priority
--           another shard holds
-- ARGV[7]   that priority ('' for none): segments (Range) hold several
--           priorities, so what a pop took below it goes back
-- ARGV[8]   KIND_LISTS: where in the lanes (1 = the first) the consumer's
--           last take found work ('' for no guess): tried first (pop_hinted)
-- ARGV[9]   MODE_FILLED: the number of lanes
-- Returns one shape: {status, second, broken, pairs...}.
--   status  '' (taken, or nothing ready), REPLY_PAUSED, or REPLY_LIMITED:
--           the queue is at its rate limit (nothing taken)
--   second  REPLY_LIMITED: in how many ms the next message may be taken;
--           else, with MODE_TOP, the best priority left ('' for none)
--   broken  the keys passed by, space-separated ('' for none): lane keys of
--           the wrong type, indexes whose members that name no priority
--           were set aside (set_aside); Go logs them
--   pairs   token, member, ...: each member as it was in its lane, its
--           attempts field counting the deliveries before this one (the
--           sweep and fail.lua count a delivery when it ends); with a lease
--           of 0 nothing is leased and the pairs are lane, member
--
-- Atomic: the pop and the lease happen together, so a consumer that dies or
-- a reply lost on the way leaves a lease that expires and redelivers;
-- nothing is ever popped without being leased.
--
-- A token is the take's time on the server's clock (13 hex digits of
-- microseconds: one script runs at a time, and each takes longer than one),
-- the message's place in the take (4 hex digits) and the suffix (ARGV[4]).
-- Tokens sort in the order their messages were taken, which the sweep uses
-- to put expired messages back in their age order (only a backward step of
-- the server's clock can mix the order of messages taken around it), and
-- are never reused, so a stale ack cannot match a new delivery.
--
-- Cost: the hot path of the default mode, so it makes as few calls as it
-- can: one GET (the queue's rate limit), the pop, one EXISTS (two when the
-- pop took a lane's last message), TIME, one ZADD, one HSET, and the
-- wake-up only when more work waits; members are passed through untouched.
-- It does not check key types first: the pop is the first write (it frees
-- memory, so a take runs at maxmemory), and if a later write fails (a key
-- of the wrong type) the take undoes what it wrote and puts the popped
-- messages back where they were before it raises the error (take_undo), so
-- it still changes nothing when it fails (but for the filled index: names
-- of empty lanes it dropped, names it wrote for lanes holding messages,
-- both true either way; and index members that name no priority, set
-- aside). A lane key of the wrong type fails the pop before it pops
-- anything; the take then asks each lane's type and pops from the others,
-- so one broken lane does not stop the rest (take_first).
--
-- The steps share one table, t (take_state); each is an include's.
local t = take_state()
local limited = take_rate(t) -- at the queue's rate limit: nothing taken
if limited then return limited end
-- Claimed before the pop: a wrong-typed wake-up key fails it here, before
-- anything was written; ZREM frees memory, so it runs at maxmemory. A take
-- that claimed it puts it back quietly (try_arm) when work remains.
if t.claimed then redis.call('ZREM', KEYS[4], WAKE) end
local res = take_first(t)
if not res then return take_nothing(t) end
if res[1] == KEYS[1] then return take_paused(t) end
take_more(t, res) -- groups resolved, more pops while work remains
take_floor(t)     -- Range: below the floor back
if t.lease == 0 then return take_unleased(t) end
take_lease(t)      -- the leases, inflight records, the wake-up
take_rate_log(t)   -- the queue's rate log (pcall)
take_groups_end(t) -- groups' counts and parks, last (pcall)
return take_reply(t)
