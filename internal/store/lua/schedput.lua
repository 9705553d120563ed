-- schedput.lua: set (insert or replace) or remove a schedule (schedules.go).
--
-- include: util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:schedules HASH
-- KEYS[2]   prioq:{Q}:sdue      ZSET
-- KEYS[3]   prioq:{Q}:sched     LIST (ZSET for a shard of a queue of several)
-- KEYS[4]   prioq:{Q}:wake      ZSET (its name is the announcements' channel)
-- ARGV[1]   the schedule's name
-- ARGV[2]   the record (JSON), or '' to remove the schedule
-- ARGV[3]   its next fire time (ms), computed by Go from the server's clock
-- ARGV[4]   YES for a shard of a queue of several
-- Returns: set: {rev, next fire time}; remove: {1 removed, 0 none}.
--
-- A replaced schedule's rev grows, so a promoter that read the old record
-- fails its compare-and-set (schedfire.lua) and reads again. When the old
-- record's next fire time has passed already (a tick due, not fired yet),
-- the schedule keeps it: that tick fires once, under the new record, rather
-- than being lost with the old one. The last fire time is kept. A set tells
-- the promoters as an earlier delayed message does (the sched marker, the
-- "d" announcement): they sleep until the earliest due time they know.
local schedules, sdue, sched, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local name, rec, sharded = ARGV[1], ARGV[2], ARGV[4] == YES
need(schedules, 'hash')
need(sdue, 'zset')
if rec == '' then
  local n = redis.call('HDEL', schedules, name)
  return redis.call('ZREM', sdue, name) + n > 0 and 1 or 0
end
if sharded then need(sched, 'zset') else need(sched, 'list') end
local rev, last = 0, ''
local old = redis.call('HGET', schedules, name)
if old then
  local r, l = string.match(old, '^(%d+)|(%d*)|')
  if r then rev, last = tonumber(r), l end
end
local next = tonumber(ARGV[3])
local cur = redis.call('ZSCORE', sdue, name)
if old and cur and tonumber(cur) <= now_ms() then next = tonumber(cur) end
rev = rev + 1
redis.call('HSET', schedules, name, rev .. '|' .. last .. '|' .. rec)
redis.call('ZADD', sdue, next, name)
tell_promoters(sched, wake, sharded)
return {rev, next}
