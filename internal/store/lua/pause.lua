-- pause.lua: put the pause sentinel in place (once).
--
-- include: lanes, util
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:paused  LIST
-- ARGV[1]  1 = lanes are lists, 2 = sorted sets
-- Returns: 1. A script rather than a pipeline so that a failure (a key of the
-- wrong type, maxmemory) leaves the queue exactly as it was.
local kind = kind_of(ARGV[1])
need(KEYS[1], lane_type(kind))
if kind == KIND_LEVELS then
  if redis.call('LLEN', KEYS[1]) == 0 then redis.call('RPUSH', KEYS[1], PAUSE) end
else
  redis.call('ZADD', KEYS[1], 0, PAUSE)
end
return 1
