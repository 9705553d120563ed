-- purge.lua: delete every waiting message (ready and delayed) of a queue.
--
-- KEYS[1]   prioq:{Q}:ids      SET   caller-given ids of live messages
-- KEYS[2]   prioq:{Q}:delayed  ZSET
-- KEYS[3]   prioq:{Q}:dstore   HASH
-- KEYS[4]   prioq:{Q}:sched    LIST
-- KEYS[5..] every lane key
-- ARGV[1]   1 = lanes are lists, 2 = sorted sets
-- Returns: how many messages were deleted. In-flight and dead messages stay;
-- their caller ids are released with the rest (the ids set is not per state).
local n = redis.call('ZCARD', KEYS[2])
for k = 5, #KEYS do
  if ARGV[1] == '1' then n = n + redis.call('LLEN', KEYS[k]) else n = n + redis.call('ZCARD', KEYS[k]) end
end
redis.call('DEL', unpack(KEYS))
return n
