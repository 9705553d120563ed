-- take.lua: pop the highest-priority ready messages and lease them.
--
-- include: each, envelope, groupdue, index, lanes, push, rates, records, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:paused    LIST/ZSET
-- KEYS[2]   prioq:{Q}:leases    ZSET
-- KEYS[3]   prioq:{Q}:inflight  HASH
-- KEYS[4]   prioq:{Q}:wake      ZSET
-- KEYS[5..] lane keys in the order to serve them (highest first, or weighted);
--           with ARGV[10], KEYS[5] is the filled index instead
-- ARGV[1]   lease (ms): the deadline is the server's now plus this
-- ARGV[2]   how many to take at most (Go caps it at MaxBatch)
-- ARGV[3]   KIND_LEVELS, KIND_RANGE, KIND_LISTS, KIND_FILLED or
--           KIND_LISTS_FILLED
-- ARGV[4]   lease token suffix, random per call
-- ARGV[5]   YES: end the reply with REPLY_TOP and the priority of the best
--           message left in these lanes ('' when none): a consumer of a queue
--           of several shards picks its next shard by it
-- ARGV[6]   pop from the first this many lanes only (0: all): a consumer of
--           a queue of several shards takes nothing below the best priority
--           another shard holds
-- ARGV[7]   that priority ('' for none): segments (Range) hold several
--           priorities, so what a pop took below it goes back (same member,
--           same score: its place is kept)
-- ARGV[9]   KIND_LISTS: where in the lanes (1 = the first) the consumer's
--           last take found work ('' for no guess): tried first, see
--           pop_hinted
-- ARGV[8]   YES: claim the wake-up first (remove its member), as a consumer
--           that pops it before taking does: a MultiConsumer takes without
--           waiting on the key, and the member must go, or no later arm_wake
--           would announce new work
-- ARGV[10]  KIND_FILLED or KIND_LISTS_FILLED, highest first, no floor nor
--           lane limit, no top asked: the number
--           of lanes; KEYS[5] is then the filled index, which names the
--           lanes holding messages, and the take builds the lane keys it
--           needs from it (pop_filled): what it costs no longer grows with
--           the lanes ('' or absent: KEYS[5..] are the lanes)
-- ARGV[11]  SHARDED for a shard of a queue of several ('' else): how a take
--           that parks a group at its rate limit wakes the promoters
-- Returns: {} when nothing is ready, {REPLY_PAUSED} when paused,
--          {REPLY_LIMITED, ms} when the queue is at its rate limit (nothing
--          taken; the next message may be taken in ms), else
--          {token1, member1, token2, member2, ...}, each member as it was in
--          its lane: its attempts field counts the deliveries before this
--          one (the sweep and fail.lua count a delivery when it ends). With a
--          lease of 0 (AtMostOnce, a queue of several shards) nothing is
--          leased and the pairs are {lane, member}. When it passed by lane
--          keys of the wrong type, or set aside members of a segment's index
--          that name no priority (set_aside), the reply ends with the pair
--          REPLY_BROKEN, "key key ..." (Go logs it); then REPLY_TOP, as
--          ARGV[5] asks.
--
-- Atomic: the pop and the lease happen together, so a consumer that dies or a
-- reply lost on the way leaves a lease that expires and redelivers; nothing is
-- ever popped without being leased.
--
-- A token is the take's time on the server's clock (13 hex digits of
-- microseconds: one script runs at a time, and each takes longer than one),
-- the message's place in the take (4 hex digits) and the random suffix.
-- Tokens sort in the order their messages were taken, which the sweep uses to
-- put expired messages back in their age order (only a backward step of the
-- server's clock can mix the order of messages taken around it), and are
-- never reused, so a stale ack cannot match a new delivery.
--
-- Cost: the hot path of the default mode, so it makes as few calls as it
-- can: one GET (the queue's rate limit), the pop, one EXISTS (two when the
-- pop took a lane's last message), TIME, one ZADD, one HSET, and the
-- wake-up only when more work waits
-- (a take of several that empties a lane pops and asks again); members are
-- passed through untouched. It does not check key types first: the pop is
-- the first write (it frees memory, so a take runs at maxmemory), and if a
-- later write fails (a key of the wrong type) the script undoes what it wrote
-- and puts the popped messages back where they were before it raises the
-- error, so it still changes nothing when it fails (but for the filled
-- index: names of empty lanes it dropped, names it wrote for lanes holding
-- messages, both true either way; and index members that name no priority,
-- set aside). A lane key of the wrong
-- type fails the pop before it pops anything; the take then asks each lane's
-- type and pops from the others, so one broken lane does not stop the rest.
local lease, count, kind, suffix, wantTop = tonumber(ARGV[1]), tonumber(ARGV[2]), kind_of(ARGV[3]), ARGV[4], ARGV[5] == YES
local popLanes = tonumber(ARGV[6] or 0)
local floor = tonumber(ARGV[7] or '')
-- Checked before the pop: past it, a nil here would lose what was popped.
assert(lease and count and kind and suffix and popLanes, 'take: bad arguments')
-- ARGV[11] (SHARDED: a shard of a queue of several) says how to wake the
-- promoters when a group is parked at its rate limit (group_due).
local sharded = ARGV[11] == SHARDED
-- The queue's keys' prefix: the leases key's name without its own.
local prefix = string.match(KEYS[2], '^(.*)leases$')

-- clock is the server's now, read once per take (the first caller reads
-- it): the rate limits' checks, their logs and the lease tokens all see the
-- same time, so that a token's time is the time its take was counted at.
local clockFloor, clockCeil, clockUs
local function clock()
  if not clockUs then clockFloor, clockCeil, clockUs = now_ms() end
  return clockFloor, clockCeil, clockUs
end

-- The queue's rate limit (limits.go), when it has one: at it, the take
-- takes nothing and says in how many ms the next message may be taken;
-- below it, it takes no more than the limit leaves, and its tokens join the
-- queue's log at the end. One GET when the queue has no limit. (Checked
-- before the pop: a take at the limit writes nothing but the log's trim.)
local qlog, qper
do
  local _, r, per = limit_of(redis.pcall('GET', prefix .. Q_RATE))
  if r and lease > 0 then
    local _, _, us = clock()
    local n = rate_window(prefix .. Q_LOG, us, per)
    if n and n >= r then
      local due = rate_due(prefix .. Q_LOG, n, 0, r, per, us)
      return {REPLY_LIMITED, string.format('%d', math.max(1, math.ceil((due - us) / 1000)))}
    end
    if n then
      count = math.min(count, r - n)
      qlog, qper = prefix .. Q_LOG, per
    end
  end
end
-- Claimed before the pop: a wrong-typed wake-up key fails it here, before
-- anything was written; ZREM frees memory, so it runs at maxmemory.
-- A take that claimed it puts it back quietly (try_arm) when work remains.
local claimed = ARGV[8] == YES
if claimed then redis.call('ZREM', KEYS[4], WAKE) end
local FIRST = 5 -- KEYS index of the first lane
local popLast = #KEYS -- KEYS index of the last lane a pop may take from
if popLanes > 0 then popLast = math.min(#KEYS, FIRST - 1 + popLanes) end
-- The lanes to pop from and look at: nil for every lane in KEYS (the
-- normal case, no table built), else those whose key is not of the wrong
-- type; popN of them may be popped from.
local lanes, popN

-- The filled index (ARGV[10]), while the take reads it: nil once the take
-- pops over every lane instead (scan_all).
local nfilled = tonumber(ARGV[10] or '')
local filled, lanePrefix
if nfilled then
  filled = KEYS[5]
  lanePrefix = string.sub(filled, 1, #filled - #FILLED_KEY) .. 'lane:'
end

-- scan_top sets top to the best priority in list[k..] (the first lane
-- holding something, and for a segment its lowest score; nil when none) and
-- reports whether there is one: a lane per command, so it costs more where
-- lanes are sparse. Only with ARGV[5].
local top
local function scan_top(list, k)
  top = nil
  for j = k, #list do
    if kind == KIND_LEVELS then
      if redis.call('EXISTS', list[j]) == 1 then top = tonumber(string.match(list[j], '(%d+)$')) end
    elseif kind == KIND_LISTS then
      top = index_head(list[j]) -- (members that name no priority passed over)
    else
      local head = redis.call('ZRANGE', list[j], 0, 0, 'WITHSCORES')
      if head[2] then top = -tonumber(head[2]) end
    end
    if top then return true end
  end
  return false
end

-- The paused key goes first in the multi-key pop: while paused it is the first
-- non-empty key, so the pop returns its sentinel (put back below) and no lane
-- is touched. Unpaused it costs nothing: no extra command per take.
local function pop(call, paused, want)
  -- Built with unpack (one C call), not a loop: with 64 lanes the loop
  -- was a measurable part of a take.
  local args
  if lanes then
    args = {popN, unpack(lanes, 1, popN)}
    if paused then
      table.insert(args, 2, KEYS[1])
      args[1] = popN + 1
    end
  elseif paused then
    args = {popLast - FIRST + 2, KEYS[1], unpack(KEYS, FIRST, popLast)}
  else
    args = {popLast - FIRST + 1, unpack(KEYS, FIRST, popLast)}
  end
  local m = #args
  args[m + 2] = 'COUNT'
  args[m + 3] = want
  if kind == KIND_LEVELS then
    args[m + 1] = 'LEFT'
    return call('LMPOP', unpack(args))
  end
  args[m + 1] = 'MIN'
  return call('ZMPOP', unpack(args))
end

-- KIND_LISTS: a pop takes the best priority's name from the first
-- non-empty index (ZMPOP, as from a segment), then up to want messages from
-- that priority's list (LPOP), and puts the name back while the list holds
-- more. A name whose list is empty (its messages cancelled) is dropped and
-- the next one popped; a list of the wrong type is passed by like a broken
-- lane (its name dropped: nothing of prioq's is in it). A member that names
-- no priority is set aside (set_aside) and the next one popped; one that
-- names a priority under another score (a hand edit) goes back under its
-- priority's score and is popped in its turn. A name below the floor goes
-- back untouched and ends the take (belowFloor: its priority).
-- The reply has an LMPOP reply's shape, {index key, messages}, then the
-- list key, the name's score and whether the list holds more.
local belowFloor
local broken, brokenSeen = {}, {}

-- report_broken names key in the reply's REPLY_BROKEN (once).
local function report_broken(key)
  if brokenSeen[key] then return end
  brokenSeen[key] = true
  broken[#broken + 1] = key
end

-- pass_by leaves index key out of this take's lanes, as broken: it holds a
-- member that names no priority which could not be set aside (set_aside),
-- and goes back untouched.
local function pass_by(key)
  if not lanes then
    lanes, popN = {}, 0
    for k = FIRST, #KEYS do
      lanes[#lanes + 1] = KEYS[k]
      if k <= popLast then popN = popN + 1 end
    end
  end
  for j = 1, #lanes do
    if lanes[j] == key then
      table.remove(lanes, j)
      if j <= popN then popN = popN - 1 end
      break
    end
  end
  report_broken(key)
end

-- earlier_env is the envelope inside m when m is a segment entry of the
-- earlier form (seq and envelope: what a Range queue of format 2 or 3 keeps
-- in its segments, found in an index when its meta key was lost and made
-- again as format 4), or nil: a known version, a printable id, the attempts.
local function earlier_env(m)
  local v = string.byte(m, SEQ_LEN + 1)
  if v ~= ENV_V1 and v ~= ENV_V2 and v ~= ENV_V3 then return nil end
  local id = env_id(m, SEQ_LEN)
  if not id or string.find(id, '[^!-~]') or not attempts(m, SEQ_LEN) then return nil end
  return string.sub(m, SEQ_LEN + 1)
end

-- set_aside moves member m (score) of segment index key, which names no
-- priority (lib.lua index_prio) and which the take has just taken out of
-- the index, to the dead letters, alone: the members beside it go on being
-- served (before, the whole segment was passed by while it stayed). It is
-- no message of this form, but it may be, or stand for, some:
-- - an entry of the earlier form (earlier_env) is a message: its record
--   keeps its segment and score, and RequeueDead puts it back as a message
--   of this form;
-- - an integer written otherwise ("007", "-0", "+7") may stand for its
--   priority's list: when that list exists and no index names it, it is
--   named here ("7", score -7), so that its messages are served;
-- - a key under the name m gives (prio:007, prio:x) is none of prioq's (no
--   prioq writes such a name): it is left in place, and the reason names it.
-- Every other record is of no lane (never requeued; DeadLetters shows it,
-- PurgeDead deletes it): a hand edit, kept for an operator to look at. The
-- index is reported (REPLY_BROKEN: logged). When the dead-letter list
-- refuses the record (of the wrong type), m is dropped if it is nothing
-- but a wrong name; one that may be or stand for data (the earlier form, a
-- key under its name) stays in its index: false is returned, and the
-- caller passes the index by, as takes did before.
-- named_anywhere reports whether an index of the queue names priority c:
-- then its list is served in that segment's turn, and naming it here too
-- ("-0" for 0, in another segment) would serve it out of its turn.
local function named_anywhere(c)
  local n = nfilled and nfilled - 1 or #KEYS - FIRST
  for j = 0, n do
    local lane = nfilled and lanePrefix .. j or KEYS[FIRST + j]
    if type(redis.pcall('ZSCORE', lane, c)) == 'string' then return true end
  end
  return false
end

local function set_aside(key, m, score)
  report_broken(key)
  local seg = string.match(key, '(%d+)$')
  local now = clock()
  local env, s = earlier_env(m), tonumber(score)
  local rec, holds = nil, env ~= nil
  if env and s and s == math.floor(s) and s <= MAX_SEQ and s >= -MAX_SEQ then
    rec = dead_record(seg, string.format('%d', s), now,
      'an entry of the earlier Range form (sequence and envelope) in the index ' .. key .. ', set aside by a take', env)
  else
    local why = 'an entry that names no priority in the index ' .. key .. ', set aside by a take'
    local n = string.match(m, '^[-+]?%d+$') and tonumber(m)
    if n and n <= MAX_SEQ and n >= -MAX_SEQ then
      local c = string.format('%d', n)
      if redis.call('TYPE', plist_key(key, c)).ok == 'list' and not named_anywhere(c) then
        redis.call('ZADD', key, -n, c)
        why = why .. '; the list of priority ' .. c .. ' it stood for is named again'
      end
    end
    local other = plist_key(key, m)
    local t = redis.call('TYPE', other).ok
    if t ~= 'none' then
      why = why .. '; the key ' .. other .. ' it names (a ' .. t .. ', none of prioq\'s) is left in place'
      holds = true
    end
    rec = dead_record(UNKNOWN_LANE, '', now, why, seg .. '|' .. score .. '|' .. m)
  end
  if type(redis.pcall('RPUSH', prefix .. DEAD_KEY, rec)) ~= 'number' then
    report_broken(prefix .. DEAD_KEY)
    if not holds then return true end -- nothing lost: dropped
    redis.call('ZADD', key, score, m)
    return false
  end
  return true
end

local function pop_lists(call, paused, want)
  while true do
    if lanes and popN == 0 then return nil end
    local res = pop(call, paused, 1)
    if not res or res.err or res[1] == KEYS[1] then return res end
    local prio, score = res[2][1][1], res[2][1][2]
    local n = index_prio(prio)
    if not n then
      if not set_aside(res[1], prio, score) then pass_by(res[1]) end
    elseif tonumber(score) ~= -n then
      -- Named right, scored wrong: back in its priority's place, so that
      -- what a take records of it (its score) says its priority.
      redis.call('ZADD', res[1], -n, prio)
    elseif floor and n < floor then
      redis.call('ZADD', res[1], score, prio)
      belowFloor = n
      return nil
    else
      local key = plist_key(res[1], prio)
      local items = redis.pcall('LPOP', key, want)
      if type(items) == 'table' and items.err then
        if not string.find(items.err, 'WRONGTYPE', 1, true) then
          -- Not the list's fault (an ACL, a cluster refusal): the name
          -- goes back and the take fails, having changed nothing (but for
          -- members it set aside).
          redis.call('ZADD', res[1], score, prio)
          return items
        end
        -- Not a list: nothing of prioq's is in it; its name goes.
        report_broken(key)
      elseif items then
        local more = #items == want and redis.call('EXISTS', key) == 1
        if more then redis.call('ZADD', res[1], score, prio) end
        return {res[1], items, key, score, more}
      end
    end
    paused = false -- a name popped: the paused key was empty
  end
end

-- pop_hinted is pop_lists without writing the index while a list stays
-- non-empty: when the paused key and every lane ahead of the guessed one
-- (ARGV[9]) are empty (one EXISTS), it reads the guessed segment's best
-- name (ZRANGE) and pops from its list, removing the name only when the
-- list empties. Under load that saves ZMPOP's pop and the ZADD putting
-- the name back. Any surprise (a wrong guess, a wrong type, a name without
-- a list) returns nil having written nothing, and pop_lists goes on.
local hint = tonumber(ARGV[9] or '')
local function pop_hinted(want)
  local k = FIRST - 1 + hint
  if k > popLast or floor then return nil end
  local ahead = {KEYS[1]}
  for j = FIRST, k - 1 do ahead[#ahead + 1] = KEYS[j] end
  if redis.call('EXISTS', unpack(ahead)) > 0 then return nil end
  local head = redis.pcall('ZRANGE', KEYS[k], 0, 0, 'WITHSCORES')
  if head.err or not head[1] then return nil end
  local prio, score = head[1], head[2]
  local n = index_prio(prio)
  if not n or tonumber(score) ~= -n then return nil end
  local key = plist_key(KEYS[k], prio)
  local items = redis.pcall('LPOP', key, want)
  if not items or items.err then return nil end
  local more = #items == want and redis.call('EXISTS', key) == 1
  if not more then redis.call('ZREM', KEYS[k], prio) end
  return {KEYS[k], items, key, score, more}
end

-- FILLED with ARGV[10]: a pop reads the best lane the filled index names
-- (ZRANGE, one member), and pops from that lane alone: a level's list, or
-- for KIND_LISTS the best priority the segment names (ZRANGE) and that
-- priority's list, as pop_hinted does; a name whose lane is empty (takes
-- without the index leave them, as do cancels) is dropped and the next one
-- read. A segment name naming no priority (see pass_by) makes the take pop
-- as without the index. The paused key is asked first (TYPE: a
-- key of the wrong type fails the take, as the multi-key pop would).
-- An index of the wrong type is passed by (reported as broken): the take
-- pops over every lane, as without one (scan_all). An empty index is
-- checked once per take against the lanes themselves (one EXISTS over all:
-- a take that finds nothing is not the hot path): lanes holding messages no
-- name points at (an index deleted by hand, or mended after it was of the
-- wrong type) are named again, and this take pops over every lane.
-- An index is known to be whole by its member FILLED_WHOLE (score -inf, so
-- first), which only such a check writes: an index that lost it (deleted,
-- then made again by a push naming its own lane alone) is checked by the
-- next take, whatever it names, or lanes no name points at would wait as
-- long as named ones keep work.
-- The reply has the shape of the pop's: {lane key, messages} (and for
-- KIND_LISTS pop_lists' list key, score and whether the list holds more).
local function all_lanes()
  local all = {}
  for j = nfilled - 1, 0, -1 do all[#all + 1] = lanePrefix .. j end
  return all
end
local function scan_all()
  lanes, popN = all_lanes(), nfilled
  filled = nil
end

local pausedSeen -- the paused key was asked (TYPE), not popped
local whole = 0 -- 1 when the filled index holds FILLED_WHOLE
local base_pop = pop -- how the take pops without the index
if kind == KIND_LISTS then base_pop = pop_lists end
local function pop_filled(call, paused, want)
  if not filled then return base_pop(call, paused, want) end
  if paused then
    local t = redis.call('TYPE', KEYS[1]).ok
    if t == lane_type(kind) then
      pausedSeen = true
      return {KEYS[1]}
    end
    if t ~= 'none' then error({err = 'WRONGTYPE prioq: ' .. KEYS[1] .. ' is a ' .. t .. ', want a ' .. lane_type(kind)}) end
  end
  while true do
    local head = redis.pcall('ZRANGE', filled, 0, 1)
    if head.err then
      broken[#broken + 1] = filled
      scan_all()
      return base_pop(call, false, want)
    end
    local name = head[2]
    local n = tonumber(name or '')
    whole = head[1] == FILLED_WHOLE and 1 or 0
    if whole == 0 then
      -- Not known whole: name every lane holding messages, mark it whole
      -- and read it again (the loop goes round); if the mark is refused,
      -- pop over every lane.
      for _, key in ipairs(all_lanes()) do
        if redis.call('EXISTS', key) == 1 then name_lane(key) end
      end
      if type(redis.pcall('ZADD', filled, '-inf', FILLED_WHOLE)) ~= 'number' then
        scan_all()
        return base_pop(call, false, want)
      end
    elseif not name then
      return nil
    elseif not (n and n == math.floor(n) and n >= 0 and n < nfilled) then
      -- Names no lane (a hand edit): dropped.
      broken[#broken + 1] = filled
      redis.call('ZREM', filled, name)
    elseif kind == KIND_LISTS then
      local key = lanePrefix .. name
      local head = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
      if head.err then
        broken[#broken + 1] = key
        redis.call('ZREM', filled, name)
      elseif not head[1] then
        redis.call('ZREM', filled, name)
      elseif not index_prio(head[1]) then
        -- Names no priority: set aside alone (ZREM first: at maxmemory the
        -- first write must free memory), or when it cannot be, the take
        -- pops without the index, which passes its segment by.
        redis.call('ZREM', key, head[1])
        if not set_aside(key, head[1], head[2]) then
          scan_all()
          return pop_lists(call, false, want)
        end
      elseif tonumber(head[2]) ~= -index_prio(head[1]) then
        -- Named right, scored wrong: put back under its own score (see
        -- pop_lists). ZREM first: at maxmemory a script's first write must
        -- free memory, and the ZADD then only restores what it removed.
        redis.call('ZREM', key, head[1])
        redis.call('ZADD', key, -index_prio(head[1]), head[1])
      else
        local prio, score = head[1], head[2]
        local list = plist_key(key, prio)
        local items = redis.pcall('LPOP', list, want)
        if type(items) == 'table' and items.err then
          if not string.find(items.err, 'WRONGTYPE', 1, true) then return items end
          broken[#broken + 1] = list
          redis.call('ZREM', key, prio)
        elseif items then
          local more = #items == want and redis.call('EXISTS', list) == 1
          if not more then redis.call('ZREM', key, prio) end
          return {key, items, list, score, more}
        else
          redis.call('ZREM', key, prio)
        end
      end
    else
      local key = lanePrefix .. name
      local items = redis.pcall('LPOP', key, want)
      if type(items) == 'table' and items.err then
        if not string.find(items.err, 'WRONGTYPE', 1, true) then return items end
        -- Not a list: nothing of prioq's is in it (writers check a lane's
        -- type first); its name goes.
        broken[#broken + 1] = key
        redis.call('ZREM', filled, name)
      elseif items then
        if #items < want then redis.call('ZREM', filled, name) end
        return {key, items}
      else
        redis.call('ZREM', filled, name)
      end
    end
  end
end

local take_pop = pop
if filled then
  take_pop = pop_filled
elseif kind == KIND_LISTS then
  take_pop = pop_lists
  if hint then
    take_pop = function(call, paused, want)
      if paused and not lanes then
        local res = pop_hinted(want)
        if res then return res end
      end
      return pop_lists(call, paused, want)
    end
  end
end

-- with_broken appends to a reply the lane keys of the wrong type passed by,
-- and the best priority left when asked (top: nil for none).
local function with_broken(reply, top)
  if #broken > 0 then
    reply[#reply + 1] = REPLY_BROKEN
    reply[#reply + 1] = table.concat(broken, ' ')
  end
  if wantTop then
    reply[#reply + 1] = REPLY_TOP
    -- %d: tostring writes 14 significant digits (1.2345678901234e+14)
    reply[#reply + 1] = top and string.format('%d', top) or ''
  end
  return reply
end

local res = take_pop(redis.pcall, true, count)
if type(res) == 'table' and res.err then
  if not string.find(res.err, 'WRONGTYPE', 1, true) then error(res) end
  -- The pop checks each key it reaches before it pops anything, so nothing
  -- was written: leave out the lanes of the wrong type and pop again (a
  -- paused key of the wrong type still fails it, writing nothing).
  -- The lanes this take pops from so far: all of KEYS', or a table.
  local cands, limit = lanes, popN
  if not cands then
    cands, limit = {}, popLast - FIRST + 1
    for k = FIRST, #KEYS do cands[#cands + 1] = KEYS[k] end
  end
  lanes, popN = {}, 0
  local want = lane_type(kind)
  for j, key in ipairs(cands) do
    local t = redis.call('TYPE', key).ok
    if t == 'none' or t == want then
      lanes[#lanes + 1] = key
      if j <= limit then popN = popN + 1 end
    else
      broken[#broken + 1] = key
    end
  end
  if popN > 0 then res = take_pop(redis.call, true, count) else res = nil end
end
if not res then
  -- Nothing to pop: with ARGV[5], say what lies below the lanes popped from.
  if wantTop then scan_top(lanes or KEYS, lanes and 1 or FIRST) end
  if belowFloor then
    -- Work is left (below the floor): the wake-up stays set, as a take
    -- that put back what it popped leaves it.
    if not top or belowFloor > top then top = belowFloor end
    try_arm(KEYS[4], top, claimed)
  end
  return with_broken({}, top)
end
if res[1] == KEYS[1] then
  if pausedSeen then return {REPLY_PAUSED} end
  if kind == KIND_LEVELS then redis.call('RPUSH', KEYS[1], PAUSE) else redis.call('ZADD', KEYS[1], 0, PAUSE) end
  return {REPLY_PAUSED}
end

-- A pop takes from one lane. When that lane had fewer than count, the next
-- lanes in order fill the rest (one more pop per lane emptied), so that a
-- take for several consumers (Go merges them) serves all it can. Whether
-- work remains (remains, below) is needed anyway for the wake-up.
-- A later pop can fail: a lane of the wrong type after an emptied one. The
-- pop checks the type before it pops, so it wrote nothing: the take stops
-- there with what it has, as a take of one would, and leaves the wake-up set.
local pops, out = {res}, {}

-- undo puts the popped messages back at the head of their lane in their
-- order, after removing the leases made so far; then it raises err.
local function undo(err, leased, recorded)
  local tokens = {}
  for i = 1, #out, 2 do tokens[#tokens + 1] = out[i] end
  if recorded then chunked('HDEL', KEYS[3], tokens) end
  if leased then chunked('ZREM', KEYS[2], tokens) end
  -- Newest pop first: a lane popped twice (a group's marker came back to
  -- it) gets its entries back in their order.
  for i = #pops, 1, -1 do
    local p = pops[i]
    -- Groups: each message back at the head of its group's list, and the
    -- marker a take put back at the tail taken out again (the entries
    -- popped, markers and all, go back below).
    for j = #(p.groups or {}), 1, -1 do
      local r = p.groups[j]
      redis.call('LPUSH', r[1], r[2])
      if r[4] then redis.call('LREM', r[3], -1, r[5]) end
    end
    local key, items = p[1], p.orig or p[2]
    if kind ~= KIND_RANGE then
      local rev = {}
      for j = #items, 1, -1 do rev[#rev + 1] = items[j] end
      if kind == KIND_LISTS then
        chunked('LPUSH', p[3], rev)
        redis.call('ZADD', key, p[4], prio_str(p[4]))
        name_lane(key)
      else
        chunked('LPUSH', key, rev)
        name_lane(key)
      end
    else
      local pairs_ = {}
      for _, it in ipairs(items) do
        pairs_[#pairs_ + 1] = it[2]
        pairs_[#pairs_ + 1] = it[1]
      end
      chunked('ZADD', key, pairs_)
    end
  end
  error(err)
end

-- remains reports whether work is left after a pop from key that took
-- fewer than asked (emptied) or all it asked: the lanes ahead of key are
-- empty (the pop took the first non-empty key), so only key and the lanes
-- after it can hold work, and one EXISTS over them asks it. With many lanes
-- after key, the popped lane is asked alone first: under load it still has
-- work, and that costs the same with 2 lanes or 64.
-- With ARGV[5], it finds the best priority left instead (scan_top).
local function remains(key, emptied, listMore)
  if filled then
    -- pop_filled dropped the name of a level it emptied; one that gave all
    -- asked (a segment: whose list said it holds no more) is asked, and
    -- dropped when empty; then the index says (beyond FILLED_WHOLE).
    if listMore then return true end
    if not emptied or kind == KIND_LISTS then
      if redis.call('EXISTS', key) == 1 then return true end
      redis.call('ZREM', filled, string.match(key, '(%d+)$'))
    end
    return redis.call('ZCARD', filled) > whole
  end
  local list, k = KEYS, FIRST
  if lanes then list, k = lanes, 1 end
  while list[k] ~= key do k = k + 1 end
  -- KIND_LISTS: the index keeps the names of the priorities left, so key
  -- itself is asked, unless the popped list said it holds more.
  if kind == KIND_LISTS then
    if wantTop then return scan_top(list, k) end
    return listMore or redis.call('EXISTS', unpack(list, k)) > 0
  end
  if emptied then k = k + 1 end
  if k > #list then return false end
  if wantTop then return scan_top(list, k) end
  if not emptied and #list - k >= MANY_LANES then
    if redis.call('EXISTS', key) == 1 then return true end
    k = k + 1
  end
  return redis.call('EXISTS', unpack(list, k)) > 0
end

-- Groups (groups.go): a popped marker stands for its group's next message.
-- Under the group's concurrency limit, the message replaces it in the pop
-- (LPOP of the group's list), and while the group has more the marker goes
-- back to the tail of its list (push_entry, named as any write): the
-- groups with work at a priority are served in turn, each first in, first
-- out. At its limit (its lease tokens in G_LEASES), the marker is parked
-- (G_PARK, written at the end) until a lease of the group ends (group_done).
-- A marker whose group's list is empty (its messages cancelled) is dropped.
-- The counts and parks are written last, after the leases; undo reverses the
-- rest (p.groups: {group list, message, list, marker back, marker}).
-- Limits (G_LIMITS: group -> "K R P", '' for every group) are read once
-- per group and take, with the group's count in flight. A key of the wrong
-- type among these is passed by: no limit, no count.
-- G is this take's group state, made at its first message of a group (a
-- take without groups makes none): per group, messages taken (taken), taken
-- from its lists (ready), parked entries (park), limit read (limit), lease
-- tokens (tokens); markers out of the lanes (marks); times to come back at
-- (due). Its keys are the queue's (prefix).
-- Rate limits (limits.go) are read with the concurrency ones: a group at
-- its rate limit is parked too, and its time to come back (when the oldest
-- take that keeps it there leaves the window) set in G_DUE, where a
-- promoter finds it (promote.lua); due: those times.
local G
local function groups_begin()
  G = {taken = {}, ready = {}, park = {}, limit = {}, tokens = {}, due = {}, marks = 0}
end
-- group_limit is g's limits as this take sees them, false for none: c, its
-- concurrency, and n, its leases; r per per ms, its rate, and m, the takes
-- in its log's window (log).
local function group_limit(g)
  local gtaken, glimit, qprefix = G.taken, G.limit, prefix
  local l = glimit[g]
  if l == nil then
    local v = redis.pcall('HMGET', qprefix .. G_LIMITS, g, '')
    local c, r, per
    if type(v) == 'table' and not v.err then c, r, per = limit_of(v[1] or v[2]) end
    l = false
    if (c or r) and G.parkOK == nil then
      -- A group at its limit is parked in G_PARK: of the wrong type, it
      -- could not be, and its marker would be lost; no limit is kept then
      -- (reported like a broken lane) rather than hide messages.
      G.parkOK = key_is(qprefix .. G_PARK, 'hash')
      if not G.parkOK then broken[#broken + 1] = qprefix .. G_PARK end
    end
    if (c or r) and G.parkOK then
      l = {}
      if c then
        local n = redis.pcall('SCARD', qprefix .. G_LEASES .. g)
        l.c, l.n = c, type(n) == 'number' and n or 0
      end
      if r then
        if not G.now then
          local _, _, us = clock()
          G.now = us
        end
        local log = qprefix .. G_LOG .. g
        local m = rate_window(log, G.now, per)
        if m then l.r, l.per, l.m, l.log = r, per, m, log end
      end
      gtaken[g] = gtaken[g] or 0
    end
    glimit[g] = l
  end
  return l
end
local requeued = false
local function resolve(p)
  if kind == KIND_RANGE then return end
  local items, kept = p[2], nil
  for j, item in ipairs(items) do
    local b = string.byte(item, 1)
    local g
    if b == 0 then g = marker_group(item) elseif b == ENV_V3 then g = env_group(item) end
    if g then
      if not G then groups_begin() end
      local gtaken, gready, gpark = G.taken, G.ready, G.park
      if not kept then
        -- (A loop, not unpack: a pop of MaxBatch holds more than the
        -- ~8,000 values unpack takes, and this is past the pop.)
        kept = {}
        for k = 1, j - 1 do kept[k] = items[k] end
        p.orig, p.groups = items, {}
      end
      if b ~= 0 then
        -- A message of a group in the lane itself (group_push passed its
        -- group's list by): delivered as it is, counted in flight.
        kept[#kept + 1] = item
        gtaken[g] = (gtaken[g] or 0) + 1
      else
        local lim = group_limit(g)
        local list = p[3] or p[1]
        local taken = gtaken[g] or 0
        local atRate = lim and lim.r and lim.m + taken >= lim.r
        if lim and (atRate or (lim.c and lim.n + taken >= lim.c)) then
          gpark[g] = (gpark[g] and gpark[g] .. ' ' or '') .. string.match(p[1], '(%d+)$') .. '|' .. (p[4] or '')
          G.marks = G.marks + 1
          if atRate then G.due[g] = math.ceil(rate_due(lim.log, lim.m, taken, lim.r, lim.per, G.now) / 1000) end
        else
          local glist = list .. G_LIST .. g
          local msg = redis.pcall('LPOP', glist)
          if type(msg) == 'string' then
            kept[#kept + 1] = msg
            gtaken[g] = (gtaken[g] or 0) + 1
            gready[g] = (gready[g] or 0) + 1
            local back = redis.call('EXISTS', glist) == 1
            if back then
              push_entry(p[1], kind, p[4], item, 'RPUSH')
              requeued = true
              -- The lane (or priority's list) holds it again: not emptied.
              p.back = true
              if kind == KIND_LISTS then p[5] = true end
            end
            if not back then G.marks = G.marks + 1 end
            p.groups[#p.groups + 1] = {glist, msg, list, back, item}
          else
            G.marks = G.marks + 1
          end
        end
      end
    elseif kept then
      kept[#kept + 1] = item
    end
  end
  if kept then p[2] = kept end
end

local raw = #res[2]
resolve(res)
local got = #res[2]
local more = remains(res[1], raw < count and not res.back, res[5])
while more and got < count do
  local want = count - got
  res = take_pop(redis.pcall, false, want)
  -- (not res: EXISTS saw work, so only for names without a list, or below
  -- the floor)
  if not res or res.err then break end
  pops[#pops + 1] = res
  raw = #res[2]
  resolve(res)
  more = remains(res[1], raw < want and not res.back, res[5])
  got = got + #res[2]
end
if requeued then more = true end
if belowFloor then
  more = true
  if not top or belowFloor > top then top = belowFloor end
end

-- Below the floor (Range): back to the segment; the first one back is then
-- the segment's best, and the best left in the shard.
if floor and kind == KIND_RANGE then
  for _, p in ipairs(pops) do
    local keep, back = {}, {}
    for _, item in ipairs(p[2]) do
      if -tonumber(item[2]) < floor then
        back[#back + 1] = item[2]
        back[#back + 1] = item[1]
      else
        keep[#keep + 1] = item
      end
    end
    if #back > 0 then
      chunked('ZADD', p[1], back)
      p[2] = keep
      local best = -tonumber(back[1])
      if not top or best > top then top = best end
      more = true
    end
  end
end

-- Without a lease (AtMostOnce): the messages left their lanes with the pop;
-- wake another consumer while work remains, and say each one's lane.
if lease == 0 then
  for _, p in ipairs(pops) do
    local lane = string.match(p[1], '(%d+)$')
    for _, item in ipairs(p[2]) do
      out[#out + 1] = lane
      if kind == KIND_RANGE then out[#out + 1] = item[1] else out[#out + 1] = item end
    end
  end
  if more then try_arm(KEYS[4], top, claimed) end
  return with_broken(out, top)
end

-- The lane index is the number that ends the popped key's name (keys.go:
-- prioq:{Q}:lane:N).
local _, nowc, us = clock()
local stamp = string.format('%013x', us)
local deadline = nowc + lease
local zargs, hargs = {}, {}
local i = 0
for _, p in ipairs(pops) do
  local lane = string.match(p[1], '(%d+)$')
  if not lane then undo({err = 'take: lane key without an index: ' .. p[1]}, false, false) end
  local head = lane .. '|'
  for _, item in ipairs(p[2]) do
    i = i + 1
    local member, rec
    if kind == KIND_LEVELS then
      member, rec = item, head .. '|' .. item
    elseif kind == KIND_LISTS then
      member, rec = item, head .. p[4] .. '|' .. item
    else
      member, rec = item[1], head .. item[2] .. '|' .. item[1]
    end
    local token = stamp .. string.format('%04x', i) .. suffix
    zargs[2 * i - 1] = deadline
    zargs[2 * i] = token
    hargs[2 * i - 1] = token
    hargs[2 * i] = rec
    out[2 * i - 1] = token
    out[2 * i] = member
    -- A message of a group: its token joins the group's leases (last).
    if G and string.byte(member, 1) == ENV_V3 then
      local g = env_group(member)
      if g then
        local t = G.tokens[g]
        if not t then
          t = {}
          G.tokens[g] = t
        end
        t[#t + 1] = token
      end
    end
  end
end

-- Each write below fails whole or not at all (a wrong type fails the first
-- chunk; past the pop, Redis no longer refuses writes for memory).
local err = pchunked('ZADD', KEYS[2], zargs)
if err then undo(err, false, false) end
err = pchunked('HSET', KEYS[3], hargs)
if err then undo(err, true, false) end
-- When work remains, wake one more idle consumer (more: from the EXISTS
-- above). Re-arming when nothing is left would only make another consumer
-- run an empty take. The marker is a single-member set, so it cannot grow.
if more then
  local ok = try_arm(KEYS[4], top, claimed)
  if type(ok) == 'table' and ok.err then undo(ok, true, true) end
end
-- The queue's rate log gets the takes (pcall: past the last write that can
-- fail).
if qlog then
  local tokens = {}
  for k = 1, #out, 2 do tokens[#tokens + 1] = out[k] end
  rate_log(qlog, us, qper, tokens)
end
-- Groups' counts and parks, last (see resolve): nothing can fail after.
if G then
  local qprefix = prefix
  for g, tokens in pairs(G.tokens) do
    pchunked('SADD', qprefix .. G_LEASES .. g, tokens)
    -- The group may have messages in flight until then (Queue.Groups).
    redis.pcall('ZADD', qprefix .. G_FLIGHT, 'GT', deadline, g)
    local lim = G.limit[g]
    if lim and lim.r then rate_log(lim.log, us, lim.per, tokens) end
  end
  for g, due in pairs(G.due) do group_due(qprefix, g, due, sharded) end
  -- A group parked at its concurrency alone has no time to wait for: one
  -- left in gdue (a cancel emptied its list meanwhile) would keep lease
  -- ends from putting it back (lib.lua rate_parked).
  for g in pairs(G.park) do
    if not G.due[g] then redis.pcall('ZREM', qprefix .. G_DUE, g) end
  end
  for g, n in pairs(G.ready) do count_add(qprefix .. G_READY, g, -n) end
  if G.marks > 0 then count_add(qprefix .. G_READY, '', -G.marks) end
  for g, entries in pairs(G.park) do
    local key = qprefix .. G_PARK
    local was = redis.pcall('HGET', key, g)
    if type(was) == 'string' then entries = was .. ' ' .. entries end
    redis.pcall('HSET', key, g, entries)
  end
end
return with_broken(out, top)
