-- progress.lua: record a delivery's progress, only while its lease is
-- current.
--
-- include: util
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:leases        ZSET
-- KEYS[2]  prioq:{Q}:prog:TOKEN    STRING
-- ARGV[1]  lease token
-- ARGV[2]  percent
-- ARGV[3]  note
-- ARGV[4]  how long (ms) the record outlives the lease deadline
-- Returns: 1 recorded, 0 lease lost (nothing changed).
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not deadline then return 0 end
local now = now_ms()
local ttl = math.max(tonumber(deadline) - now, 0) + tonumber(ARGV[4])
redis.call('SET', KEYS[2], ARGV[2] .. '|' .. now .. '|' .. ARGV[3], 'PX', math.floor(ttl))
return 1
