-- sweep.lua: redeliver messages whose lease expired; re-arm a lost wake-up.
--
-- include: bylane, checks, envelope, groupend, lanes, order, parkentry, records, sweepflight, sweepgroups, util, wake
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
mend_parked(KEYS[6], KEYS[1], KEYS[4], kind, now)
refresh_flight(KEYS[6], KEYS[1], now, limit)
local more = 0
if #tokens == limit then more = 1 end
-- (Parked entries set aside as corrupt, group_unpark, count as dead.)
return {back, #deads + BURIED, more}
