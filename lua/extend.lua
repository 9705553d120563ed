-- extend.lua: move a lease deadline, only while the lease is current.
--
-- KEYS[1]  prioq:{Q}:leases  ZSET  lease token -> deadline (ms)
-- ARGV[1]  lease token
-- ARGV[2]  new deadline (ms)
-- Returns: 1 extended, 0 lease lost (nothing changed).
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
