-- finish.lua: end one delivery's lease and keep its finished record (an ack
-- with a result, or any ack of a queue that retains finished messages), or,
-- with no lease token, keep the record of a message whose lease another
-- call already ended (dead-lettered by fail.lua).
--
-- include: groupend, lanes, parkentry, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:leases    ZSET
-- KEYS[2]  prioq:{Q}:inflight  HASH
-- KEYS[3]  prioq:{Q}:ids       SET
-- KEYS[4]  prioq:{Q}:counts    HASH
-- KEYS[5]  prioq:{Q}:wake      ZSET
-- KEYS[6]  a lane key of the queue (lane 0): the group keys are its siblings
-- KEYS[7]  prioq:{Q}:done      ZSET
-- KEYS[8]  prioq:{Q}:res       HASH
-- KEYS[9]  prioq:{Q}:reply:ID  LIST
-- KEYS[10] prioq:{Q}:prog:TOKEN STRING
-- ARGV[1]  KIND_LEVELS, KIND_LISTS, KIND_FILLED or KIND_LISTS_FILLED
-- ARGV[2]  how many lanes the queue has (NLANES)
-- ARGV[3]  lease token ('' : record only, the lease ended already)
-- ARGV[4]  the message's id
-- ARGV[5]  its id again if the caller gave it (released on the ack), else ''
-- ARGV[6]  its group ('' for none)
-- ARGV[7]  the record's head: "outcome|attempts|enqueued ms|"
-- ARGV[8]  the record's tail: "error length|" error result
-- ARGV[9]  keep records this long (ms) after they finish
-- ARGV[10] keep at most this many records
-- ARGV[11] trim at most this many records by age, and as many by count
-- Returns: 1 done, 0 lease lost (nothing changed).
-- The record is "head" finished-ms "|" until-ms "|" tail (retain.go). The
-- ZREM of the lease is the fence: a handler whose lease was lost writes
-- nothing. Types are checked first; the first write frees memory (ZREM).
need(KEYS[2], 'hash')
need(KEYS[3], 'set')
need(KEYS[7], 'zset')
need(KEYS[8], 'hash')
need(KEYS[9], 'list')
local kind = kind_of(ARGV[1])
NLANES = tonumber(ARGV[2])
local token = ARGV[3]
local now = now_ms()
local keep = tonumber(ARGV[9])
local max, budget = tonumber(ARGV[10]), tonumber(ARGV[11])
if token ~= '' then
  if redis.call('ZREM', KEYS[1], token) == 0 then return 0 end
  redis.call('HDEL', KEYS[2], token)
  if ARGV[5] ~= '' then redis.call('SREM', KEYS[3], ARGV[5]) end
  redis.call('DEL', KEYS[10])
  redis.pcall('HINCRBY', KEYS[4], COUNT_ACKED, 1)
  if ARGV[6] ~= '' and group_ended(KEYS[6], kind, ARGV[6], token) then
    try_arm(KEYS[5], nil)
  end
end
redis.call('HSET', KEYS[8], ARGV[4], ARGV[7] .. now .. '|' .. (now + keep) .. '|' .. ARGV[8])
redis.call('ZADD', KEYS[7], now, ARGV[4])
-- Trim: the records older than keep, then the oldest past max, each at
-- most budget a call (a write adds one, so the set comes back within its
-- bounds after a lowered bound within a few writes).
local old = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', '(' .. (now - keep), 'LIMIT', 0, budget)
if #old > 0 then
  chunked('HDEL', KEYS[8], old)
  chunked('ZREM', KEYS[7], old)
end
local over = redis.call('ZCARD', KEYS[7]) - max
if over > 0 then
  local gone = redis.call('ZRANGE', KEYS[7], 0, math.min(over, budget) - 1)
  chunked('HDEL', KEYS[8], gone)
  chunked('ZREM', KEYS[7], gone)
end
-- Wake the callers waiting for it (WaitResult): a short-lived list.
redis.call('LPUSH', KEYS[9], REPLY_MARK)
redis.call('PEXPIRE', KEYS[9], REPLY_TTL_MS)
return 1
