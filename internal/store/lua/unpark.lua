-- unpark.lua: put back the markers of groups parked at their limit, after
-- acks without Lua ended leases of theirs (groups.go).
--
-- include: groupend, lanes, park, parkentry, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:wake  ZSET
-- KEYS[2]  a lane key of the queue (lane 0): the group keys are its siblings
-- ARGV[1]  KIND_LEVELS, KIND_LISTS, KIND_FILLED or KIND_LISTS_FILLED
-- ARGV[2]  how many lanes the queue has (NLANES)
-- ARGV[3..] the groups
-- Returns: how many groups' markers went back. A group no longer parked
-- (another lease end put it back first) costs one HGET. When any went back,
-- a consumer is woken; the wake-up key's type is checked before any write.
-- Each group's first write removes its parked entries (group_unpark), so
-- this runs at maxmemory.
local kind = kind_of(ARGV[1])
NLANES = tonumber(ARGV[2])
need(KEYS[1], 'zset')
local back = 0
for i = 3, #ARGV do
  -- (A group waiting for its rate comes back from a promoter.)
  if not rate_parked(KEYS[2], ARGV[i]) and group_unpark(KEYS[2], kind, ARGV[i]) then back = back + 1 end
end
if back > 0 then arm_wake(KEYS[1], nil) end
return back
