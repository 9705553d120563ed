-- inc/lanes.lua: the kind argument, lane keys and their siblings, the filled index.
-- FILLED: the queue's lanes are named in its filled index (kind_of sets it).
local FILLED = false

-- kind_of reads a script's kind argument: KIND_LEVELS, KIND_RANGE or
-- KIND_LISTS. KIND_FILLED and KIND_LISTS_FILLED are read as KIND_LEVELS and
-- KIND_LISTS and set FILLED, which makes push_one, by_lane and takes name
-- each lane they push to in the filled index (keys.go): a take of a queue of
-- many lanes reads there the best lane holding messages instead of looking
-- at every lane.
local function kind_of(arg)
  local k = tonumber(arg)
  if k == KIND_FILLED then
    FILLED = true
    return KIND_LEVELS
  elseif k == KIND_LISTS_FILLED then
    FILLED = true
    return KIND_LISTS
  end
  return k
end

-- queue_key is the key `name` of the queue (or shard) of lane key `lane`:
-- its sibling (keys.go), in the same hash tag, so the same slot (the filled
-- index, the group keys).
local function queue_key(lane, name)
  return string.match(lane, '^(.*)lane:%d+$') .. name
end

-- name_lane names lane key `lane` in its filled index after a push into it
-- (FILLED only): member N, score -N, so that the index's first member is the
-- best lane. pcall: an index of the wrong type is not this push's failure
-- (no script may fail after its first write); takes then pass the index by
-- and pop over every lane (take.lua). The name may outlive the lane's
-- messages (takes that pop without the index leave it): takes drop it.
local function name_lane(lane)
  if not FILLED then return end
  local n = string.match(lane, '(%d+)$')
  redis.pcall('ZADD', queue_key(lane, FILLED_KEY), '-' .. n, n)
end

-- lane_type is the Redis type of a lane key: a LIST for Levels, a ZSET for
-- Range (the messages themselves, KIND_RANGE, or the index of the
-- priorities waiting, KIND_LISTS).
local function lane_type(kind)
  if kind == KIND_LEVELS then return 'list' end
  return 'zset'
end

-- plist_key is the key of the list of priority prio (a string as prio_str
-- writes it) of the Range segment whose index is lane key `lane`
-- (KIND_LISTS): the lane key's prefix, PRIO_LIST and the priority
-- (keys.go). Built here because a take learns the priority from the index
-- only as it pops it; the key is in the lane key's hash tag, so its slot.
local function plist_key(lane, prio)
  return string.match(lane, '^(.*)lane:%d+$') .. PRIO_LIST .. prio
end

-- prio_str is the priority of a segment score (its opposite) as a decimal
-- integer, the member of that priority in a segment's index (KIND_LISTS).
-- Scores are checked integers within 2^53 (routed), so %d is exact.
local function prio_str(score)
  return string.format('%d', -tonumber(score))
end
