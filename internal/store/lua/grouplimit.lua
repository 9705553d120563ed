-- grouplimit.lua: set a group's limits, concurrency and rate (groups.go, limits.go).
--
-- include: lanes, park, parkentry, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:glimits  HASH
-- KEYS[2]  prioq:{Q}:gpark    HASH
-- KEYS[3]  prioq:{Q}:wake     ZSET
-- KEYS[4]  a lane key of the queue (lane 0): the group keys are its siblings
-- ARGV[1]  KIND_LEVELS, KIND_LISTS, KIND_FILLED or KIND_LISTS_FILLED
-- ARGV[2]  the group ('' for every group without a limit of its own)
-- ARGV[3]  the limits, "K R P" (limits.go; '' for none)
-- ARGV[4]  how many lanes the queue has (NLANES)
-- Returns: how many groups' parked markers went back to their lanes.
-- Every parked group goes back (group_unpark), so that a raised limit
-- applies at the next take; one still at its limit is parked again by it.
-- The keys are checked first. The first write removes the group's old
-- limits (HDEL), so that at maxmemory, where Redis refuses only a script's
-- first write that may grow memory, a limit can still be raised or lifted
-- to let a full Redis drain: the new value replaces the old (a group given
-- its first limit grows memory by that one field).
local kind, group, limit = kind_of(ARGV[1]), ARGV[2], ARGV[3]
NLANES = tonumber(ARGV[4])
need(KEYS[1], 'hash')
need(KEYS[2], 'hash')
need(KEYS[3], 'zset')
redis.call('HDEL', KEYS[1], group)
if limit ~= '' then redis.call('HSET', KEYS[1], group, limit) end
local back = 0
for _, g in ipairs(redis.call('HKEYS', KEYS[2])) do
  if group_unpark(KEYS[4], kind, g) then back = back + 1 end
end
-- Every parked group is back: no time in gdue stands (a group still at its
-- rate limit gets a new one from its next take). DEL takes any type.
redis.call('DEL', queue_key(KEYS[4], G_DUE))
if back > 0 then arm_wake(KEYS[3], nil) end
return back
