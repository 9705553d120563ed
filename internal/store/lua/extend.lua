-- extend.lua: move a lease deadline, only while the lease is current.
--
-- include: util
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:leases  ZSET
-- ARGV[1]  lease token
-- ARGV[2]  the new lease (ms): the deadline is the server's now plus this
-- Returns: 1 extended, 0 lease lost (nothing changed).
-- The ZREM comes first: it frees memory, so Redis lets the script through at
-- maxmemory (it refuses a script only at a first write that may grow memory),
-- and the ZADD that follows only restores what it removed.
local _, nowc = now_ms()
local deadline = nowc + tonumber(ARGV[2]) -- before the ZREM: a bad argument fails with nothing changed
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
return 1
