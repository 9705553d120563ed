-- cancelrun.lua: end the delivery of a message in flight for Queue.Cancel:
-- its lease and record go, the token is marked cancelled (the holder's
-- renewer reads the mark and cancels its handler), the message is not
-- delivered again.
--
-- include: groupend, lanes, parkentry, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:leases     ZSET
-- KEYS[2]  prioq:{Q}:inflight   HASH
-- KEYS[3]  prioq:{Q}:ids        SET
-- KEYS[4]  prioq:{Q}:cancelled  ZSET
-- KEYS[5]  prioq:{Q}:counts     HASH
-- KEYS[6]  prioq:{Q}:wake       ZSET
-- KEYS[7]  a lane key of the queue (lane 0): the group keys are its siblings
-- ARGV[1]  KIND_LEVELS, KIND_LISTS, KIND_FILLED or KIND_LISTS_FILLED
-- ARGV[2]  how many lanes the queue has (NLANES)
-- ARGV[3]  lease token (the token names one delivery: its lease still
--          there is the fence, no other delivery can hold it)
-- ARGV[4]  the message's id (released from the ids set: a no-op for a
--          generated id, never in it)
-- ARGV[5]  its group ('' for none): its slot comes back (group_ended)
-- ARGV[6]  how long a mark is kept (ms)
-- Returns: 1 cancelled, 0 no such lease (acked, retried, expired meanwhile:
-- nothing changed).
-- Every key written is checked before the first write, a ZREM (the script
-- runs at maxmemory); the counts key is written by pcall.
local kind = kind_of(ARGV[1])
NLANES = tonumber(ARGV[2])
local token, id, g, keep = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local _, nowc = now_ms()
need(KEYS[2], 'hash')
need(KEYS[3], 'set')
need(KEYS[4], 'zset')
need(KEYS[6], 'zset')
if redis.call('ZREM', KEYS[1], token) == 0 then return 0 end
redis.call('HDEL', KEYS[2], token)
redis.call('SREM', KEYS[3], id)
redis.call('ZADD', KEYS[4], nowc, token)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (nowc - keep))
redis.call('PEXPIRE', KEYS[4], keep)
redis.pcall('HINCRBY', KEYS[5], COUNT_CANCELLED, 1)
if g ~= '' and group_ended(KEYS[7], kind, g, token) then try_arm(KEYS[6], nil) end
-- A hint on the shard channel: a MultiConsumer's renewer renews at once
-- and so learns of the cancel (consumers that do not listen learn it at
-- their next renewal).
announce(KEYS[6], ANNOUNCE_CANCELLED)
return 1
