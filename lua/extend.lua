-- extend.lua: move a lease deadline, only while the lease is current.
--
-- KEYS[1]  prioq:{Q}:leases  ZSET  lease token -> deadline (ms)
-- ARGV[1]  lease token
-- ARGV[2]  the new lease (ms): the deadline is the server's now plus this
-- Returns: 1 extended, 0 lease lost (nothing changed).
-- The ZREM comes first: it frees memory, so Redis lets the script through at
-- maxmemory (it refuses a script only at a first write that may grow memory),
-- and the ZADD that follows only restores what it removed.
local _, nowc = now_ms()
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[1], nowc + tonumber(ARGV[2]), ARGV[1])
return 1
