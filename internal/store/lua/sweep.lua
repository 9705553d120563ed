-- sweep.lua: redeliver messages whose lease expired; re-arm a lost wake-up.
--
-- include: bylane, checks, envelope, groupend, lanes, order, park, parkentry, rates, records, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:leases    ZSET
-- KEYS[2]   prioq:{Q}:inflight  HASH
-- KEYS[3]   prioq:{Q}:dead      LIST
-- KEYS[4]   prioq:{Q}:wake      ZSET
-- KEYS[5]   prioq:{Q}:paused    LIST/ZSET
-- KEYS[6..] every lane key, lane 0 first
-- ARGV[1]   most leases to handle in this call
-- ARGV[2]   max attempts
-- ARGV[3]   1 = lanes are lists, 2 = sorted sets
-- Returns: {redelivered, dead, more} where more = 1 when the limit was hit.
-- An expired message goes back to the head of its lane (a list: LPUSH; a
-- segment: its old member, whose sequence number sorts before newer ones), so
-- it is served before newer messages of its priority, and expired messages of
-- one lane keep the order they were taken in (their age), whatever order
-- their leases ended in (an Extend moves a deadline). A message of a group
-- goes to the head of its group's list and takes its group's marker to the
-- head of its lane (inc/grouppush.lua group_push): the first of the group's expired
-- messages comes back at once, the others at the group's next turns (groups
-- are served one message per turn). A message whose lane key
-- holds the wrong type goes to the dead letters, keeping its lane, so that the
-- others go on. The first writes remove the expired leases, which frees
-- memory, so the sweep runs at maxmemory.
local limit, maxa, kind = tonumber(ARGV[1]), tonumber(ARGV[2]), kind_of(ARGV[3])
local now = now_ms()
local nlanes = #KEYS - 5
NLANES = nlanes
local off = 0
if kind == KIND_RANGE then off = SEQ_LEN end
-- Latest-expired first: when more have expired than one call handles, the
-- earlier-expired (mostly older) come in a later call, pushed ahead of these.
local tokens = redis.call('ZREVRANGEBYSCORE', KEYS[1], now, '-inf', 'LIMIT', 0, limit)
local add, flush = by_lane(6, kind)
local usable = lane_checker(6, kind)
local back, deads, best = 0, {}, nil
local ended = {} -- {envelope, token} of the leases ending here, for their groups (group_done)
if #tokens > 0 then
  local recs = hmget(KEYS[2], tokens)
  -- Newest-taken first: LPUSH puts the last value first, so the oldest
  -- ends up at the head.
  local order = {}
  for i = 1, #tokens do order[i] = i end
  table.sort(order, function(a, b) return taken_before(tokens[b], tokens[a]) end)
  for _, i in ipairs(order) do
    local rec = recs[i]
    if rec then
      local lane, score, member = routed(rec, nlanes, kind)
      if not lane then
        local why = 'corrupt in-flight record'
        deads[#deads + 1] = dead_record(UNKNOWN_LANE, '', now, why, rec)
      else
        ended[#ended + 1] = {string.sub(member, off + 1), tokens[i]}
        -- The expired delivery counts now: take left the message as it was.
        local a = attempts(member, off)
        if a then
          a = a + 1
          member = with_attempts(member, off, a)
        end
        local _, why = usable(lane, score)
        if (a or 0) >= maxa then why = 'lease expired' end
        if why then
          deads[#deads + 1] = dead_record(lane, score, now, why, string.sub(member, off + 1))
        else
          add(lane, score, member)
          back = back + 1
          local p = prio_of(lane, score, kind)
          if not best or p > best then best = p end
        end
      end
    end
  end
  if #deads > 0 then need(KEYS[3], 'list') end
end
-- A wake-up marker can be lost (a consumer killed right after popping it);
-- re-arm while work waits, so idle consumers never sleep on ready work.
-- Idle (nothing expired, lanes empty) this costs one EXISTS.
local rearm = (back > 0 or #ended > 0 or redis.call('EXISTS', unpack(KEYS, 6)) > 0) and redis.call('EXISTS', KEYS[5]) == 0
if rearm then need(KEYS[4], 'zset') end

if #tokens > 0 then
  chunked('ZREM', KEYS[1], tokens)
  chunked('HDEL', KEYS[2], tokens)
end
-- A group's slot comes back when its lease ends, and with it the markers
-- parked at its limit: before the messages go back, so that the push of an
-- expired message of a group moves its group's marker, wherever it is, to
-- the head in the messages' order (inc/grouppush.lua group_push).
local unparked = false
for _, e in ipairs(ended) do
  if group_done(KEYS[6], kind, e[1], e[2]) then unparked = true end
end
-- Back at the head: LPUSH puts its last value first, the oldest, collected
-- last. Segment members keep their scores and sequence numbers.
flush('LPUSH')
if #deads > 0 then chunked('RPUSH', KEYS[3], deads) end
if rearm and (back > 0 or unparked) then
  arm_wake(KEYS[4], best) -- the redelivered messages' best priority
elseif rearm and redis.call('EXISTS', KEYS[4]) == 0 then
  -- At maxmemory Redis refuses a script's first write that may grow memory;
  -- a removal before it (of nothing, here) lets this one-member marker
  -- through, so consumers wake to drain a full Redis. What waits is not
  -- known: the marker says so (-inf).
  redis.call('ZREM', KEYS[4], WAKE)
  arm_wake(KEYS[4], nil)
end
-- Groups parked at their limit whose leases are no longer all alive: an ack
-- cut between its ZREM and the SREM of its token (a process killed in its
-- pipeline), a record lost, or a put-back of markers that never ran after
-- the last lease ended. Their dead tokens go, and a group below its limit
-- gets its markers back: nothing waits on a lease that no longer exists.
-- O(parked groups x their limits); one HGETALL when none is parked.
local park = queue_key(KEYS[6], G_PARK)
local parked = redis.pcall('HKEYS', park)
if type(parked) == 'table' and not parked.err and #parked > 0 then
  local limits, gdue = queue_key(KEYS[6], G_LIMITS), queue_key(KEYS[6], G_DUE)
  local mended = false
  for _, g in ipairs(parked) do
    local leases = queue_key(KEYS[6], G_LEASES .. g)
    local toks = redis.pcall('SMEMBERS', leases)
    local n = 0
    if type(toks) == 'table' and not toks.err then
      for _, tok in ipairs(toks) do
        if redis.call('ZSCORE', KEYS[1], tok) then n = n + 1 else redis.pcall('SREM', leases, tok) end
      end
    end
    local l = redis.pcall('HMGET', limits, g, '')
    local lim = type(l) == 'table' and not l.err and limit_of(l[1] or l[2])
    -- A group parked at its rate limit comes back at its due time, from a
    -- promoter (gdue); one whose time has passed (no promoter ran: every
    -- consumer has NoPromoter, or its wake-up was lost) or that has none
    -- (lost with a gdue of the wrong type) comes back here, and its next
    -- take parks it again if need be.
    local timed = redis.pcall('ZSCORE', gdue, g)
    -- (A time that is no number, "inf" written by hand, counts as passed.)
    if type(timed) == 'string' and not (tonumber(timed) and tonumber(timed) > now) then
      redis.call('ZREM', gdue, g)
      timed = nil
    end
    if type(timed) ~= 'string' and (not lim or n < lim) and group_unpark(KEYS[6], kind, g) then mended = true end
  end
  if mended then try_arm(KEYS[4], nil) end
end
-- The groups that may have messages in flight (G_FLIGHT, Queue.Groups):
-- one whose time passed is dropped when none of its leases is left, or gets
-- its latest lease's deadline (an Extend moved it past the take's). One
-- ZRANGEBYSCORE when no time passed. The drop frees memory; the new time
-- replaces the old (pcall: refused at maxmemory when it is this sweep's
-- first write, it is asked again at the next). A key of the wrong type only
-- misleads Groups: passed by.
local gflight = queue_key(KEYS[6], G_FLIGHT)
local flying = redis.pcall('ZRANGEBYSCORE', gflight, '-inf', now, 'LIMIT', 0, limit)
if type(flying) == 'table' and not flying.err then
  for _, g in ipairs(flying) do
    local toks = redis.pcall('SMEMBERS', queue_key(KEYS[6], G_LEASES .. g))
    local last = nil
    if type(toks) == 'table' and not toks.err then
      for i = 1, #toks, CHUNK do
        local d = redis.call('ZMSCORE', KEYS[1], unpack(toks, i, math.min(i + CHUNK - 1, #toks)))
        for _, v in ipairs(d) do
          if v and (not last or tonumber(v) > last) then last = tonumber(v) end
        end
      end
    end
    if last then
      redis.pcall('ZADD', gflight, 'XX', string.format('%d', last), g)
    else
      redis.call('ZREM', gflight, g)
    end
  end
end
local more = 0
if #tokens == limit then more = 1 end
-- (Parked entries set aside as corrupt, group_unpark, count as dead.)
return {back, #deads + BURIED, more}
