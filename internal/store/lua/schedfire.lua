-- schedfire.lua: enqueue a schedule's due ticks and move its next fire
-- time, compare-and-set (schedules.go).
--
-- include: checks, delayed, schedule, util
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:schedules HASH
-- KEYS[2]   prioq:{Q}:sdue      ZSET
-- KEYS[3]   prioq:{Q}:ids       SET
-- KEYS[4]   prioq:{Q}:seq       STRING
-- KEYS[5]   prioq:{Q}:delayed   ZSET
-- KEYS[6]   prioq:{Q}:dstore    HASH
-- KEYS[7]   prioq:{Q}:sched     LIST (ZSET for a shard of a queue of several)
-- KEYS[8]   prioq:{Q}:counts    HASH
-- ARGV[1]   the schedule's name
-- ARGV[2]   the next fire time Go read (ms): the compare of the CAS
-- ARGV[3]   the record's rev Go read ('' for a record that did not parse)
-- ARGV[4]   the new next fire time (ms), or '' to take the schedule off sdue
--           (a record that does not parse: it would be due forever)
-- ARGV[5]   YES for a shard of a queue of several
-- ARGV[6]   the number of ticks, then 5 fields per tick: id, due time (ms,
--           the tick's), lane, score, envelope
-- Returns: {fired, stored}: fired is 0 when sdue no longer holds ARGV[2] for
-- the schedule, or its record's rev is no longer ARGV[3] (another promoter
-- fired it, or an upsert or Unschedule came first): nothing is written.
--
-- Each tick goes into the delayed set, due at its tick time, so the same
-- promotion that follows (Go's) moves it into its lane as any delayed
-- message: one path for layouts, groups and lanes, and no lane key here. A
-- tick whose id is alive already (a tick fired twice: a write lost in a
-- failover) is passed over, as an enqueue of a duplicate id. Everything is
-- checked before the first write; the first write may grow memory, so at
-- maxmemory the call is refused whole.
local name, n = ARGV[1], tonumber(ARGV[6])
local schedules, sdue, ids, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local delayed, dstore, sched = KEYS[5], KEYS[6], KEYS[7]
local sharded = ARGV[5] == YES
need(schedules, 'hash')
need(sdue, 'zset')
local cur = redis.call('ZSCORE', sdue, name)
if not cur or tonumber(cur) ~= tonumber(ARGV[2]) then return {0, 0} end
local rec = redis.call('HGET', schedules, name)
local rev, body
if rec then rev, body = string.match(rec, '^(%d+)|%d*|(.*)$') end
if ARGV[3] ~= '' and rev ~= ARGV[3] then return {0, 0} end
if n > 0 then
  if not ARGV[6 + n * 5] then error('schedfire: fewer than ' .. n .. ' ticks') end
  need(ids, 'set')
  need_delayed(delayed, dstore, sched, sharded)
  need_seq(seqkey, n)
end

local seq = 0
if n > 0 then seq = redis.call('INCRBY', seqkey, n) - n end
local stored, last, earliest = 0, nil, nil
for i = 0, n - 1 do
  local b = 7 + i * 5
  local id, due = ARGV[b], tonumber(ARGV[b + 1])
  seq = seq + 1
  last = ARGV[b + 1]
  if redis.call('HEXISTS', dstore, id) == 0 and redis.call('SADD', ids, id) == 1 then
    earliest = schedule(delayed, dstore, sched, due, seq, id, ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], earliest, sharded)
    stored = stored + 1
  end
end
if ARGV[4] == '' then
  redis.call('ZREM', sdue, name)
else
  redis.call('ZADD', sdue, ARGV[4], name)
end
if last and rev then redis.call('HSET', schedules, name, rev .. '|' .. last .. '|' .. body) end
-- For rates only: pcall, last (as enqueue.lua).
if stored > 0 then redis.pcall('HINCRBY', KEYS[8], COUNT_ENQUEUED, stored) end
return {1, stored}
