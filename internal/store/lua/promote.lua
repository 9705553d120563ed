-- promote.lua: move due delayed messages into their lanes, up to a batch.
--
-- include: bylane, checks, delayed, lanes, order, park, parkentry, records, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:delayed  ZSET
-- KEYS[2]   prioq:{Q}:dstore   HASH
-- KEYS[3]   prioq:{Q}:seq      STRING
-- KEYS[4]   prioq:{Q}:wake     ZSET
-- KEYS[5]   prioq:{Q}:dead     LIST
-- KEYS[6..] every lane key, lane 0 first
-- ARGV[1]   '' (the server's now), or a time in ms (tests run a virtual clock)
-- ARGV[2]   batch limit (Go caps it at MaxBatch)
-- ARGV[3]   1 or 2 = arm the consumer wake-up (AtLeastOnce, or a shard of a
--           queue of several), 0 = not
-- ARGV[4]   the kind (KIND_LEVELS, KIND_RANGE, KIND_LISTS, KIND_FILLED or
--           KIND_LISTS_FILLED)
-- Returns: {moved, ms until the next due time (0 when due now) or -1 when
-- nothing is delayed, no group waits for its rate (gdue, below) and no
-- schedule is set (sdue), the server's now (ms), the first schedule's next
-- fire time (ms, -1: none)}: the promoter's timer runs on these, not on the
-- host's wall clock.
-- Messages move in (due time, sequence) order: those due in the same
-- millisecond in the order they were scheduled.
-- Atomic: two promoters running at once each move a disjoint set (the second
-- sees only what the first left), so nothing is moved twice. Everything is
-- read and checked first; the first writes remove the batch from the delayed
-- set and its store, which frees memory, so promotion runs at maxmemory.
local now = tonumber(ARGV[1])
if not now then now = now_ms() end
local limit, arm, kind = tonumber(ARGV[2]), ARGV[3] ~= NO, kind_of(ARGV[4])
local nlanes = #KEYS - 5
NLANES = nlanes
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
local moved = 0
if #members > 0 then
  local ids = {}
  for i, m in ipairs(members) do ids[i] = delayed_id(m) end
  local vals = hmget(KEYS[2], ids)
  local add, flush = by_lane(6, kind)
  local usable = lane_checker(6, kind)
  local bad, best = {}, nil
  for i = 1, #ids do
    local lane, score, rest = routed(vals[i], nlanes, kind)
    if lane and #rest > SEQ_LEN then
      local ok, why = usable(lane, score)
      if ok then
        add(lane, score, string.sub(rest, SEQ_LEN + 1))
        moved = moved + 1
        local p = prio_of(lane, score, kind)
        if not best or p > best then best = p end
      else
        -- Its lane key holds the wrong type: the message waits in the dead
        -- letters (requeued once the key is mended), the others go on.
        bad[#bad + 1] = dead_record(lane, score, now, why, string.sub(rest, SEQ_LEN + 1))
      end
    elseif vals[i] then
      -- A record that does not parse is kept, byte for byte, in the dead
      -- letters; an id without a record is only removed.
      local why = 'corrupt delayed record'
      bad[#bad + 1] = dead_record(UNKNOWN_LANE, '', now, why, vals[i])
    end
  end
  if kind == KIND_RANGE and moved > 0 then need_seq(KEYS[3], moved) end
  if arm and moved > 0 then need(KEYS[4], 'zset') end
  if #bad > 0 then need(KEYS[5], 'list') end

  chunked('ZREM', KEYS[1], members)
  chunked('HDEL', KEYS[2], ids)
  -- Lists: one RPUSH per lane, in due order. Segments: members get fresh
  -- sequence numbers, in due order.
  local seq = 0
  if kind == KIND_RANGE and moved > 0 then seq = redis.call('INCRBY', KEYS[3], moved) - moved end
  flush('RPUSH', seq)
  if #bad > 0 then chunked('RPUSH', KEYS[5], bad) end
  if arm and moved > 0 then arm_wake(KEYS[4], best) end
end
-- Groups parked at their rate limit whose next take is due (take.lua,
-- inc/groupdue.lua group_due): their markers go back to their lanes, a consumer is
-- woken, and their time counts as a due time for the promoter's timer.
-- (Written after the checks above: each write here is checked or pcall.)
local nextDue = nil
if kind ~= KIND_RANGE then
  local gdue = queue_key(KEYS[6], G_DUE)
  local due = redis.pcall('ZRANGEBYSCORE', gdue, '-inf', now, 'LIMIT', 0, limit)
  if type(due) == 'table' and not due.err then
    if #due > 0 then
      chunked('ZREM', gdue, due)
      local back = false
      for _, g in ipairs(due) do
        if group_unpark(KEYS[6], kind, g) then back = true end
      end
      if back and arm then try_arm(KEYS[4], nil) end
    end
    local head = redis.call('ZRANGE', gdue, 0, 0, 'WITHSCORES')
    if head[2] then nextDue = tonumber(head[2]) end
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] and (not nextDue or tonumber(head[2]) < nextDue) then nextDue = tonumber(head[2]) end
-- The first schedule's next fire time (schedules.go): a due time too, which
-- Go fires (schedfire.lua) when it has passed. One read of a key that, on a
-- queue without schedules, does not exist; one of the wrong type holds none.
local sdue = -1
local shead = redis.pcall('ZRANGE', queue_key(KEYS[6], S_DUE), 0, 0, 'WITHSCORES')
if type(shead) == 'table' and shead[2] then
  sdue = tonumber(shead[2])
  if not nextDue or sdue < nextDue then nextDue = sdue end
end
if nextDue then return {moved, math.max(0, nextDue - now), now, sdue} end
return {moved, -1, now, sdue}
