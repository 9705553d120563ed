-- cancel.lua: remove one waiting message (delayed or ready) by id.
--
-- include: checks, delayed, each, envelope, lanes, parkentry, push, util
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:ids      SET
-- KEYS[2]   prioq:{Q}:delayed  ZSET
-- KEYS[3]   prioq:{Q}:dstore   HASH
-- KEYS[4..] the lane keys to search, in any order
-- ARGV[1]   id
-- ARGV[2]   1 = lanes are lists, 2 = sorted sets
-- Returns: 1 removed, 0 no waiting message has that id.
-- Cost: a delayed message is found in O(log n) through the dstore hash. Lanes
-- are not indexed by id (an index would cost a command on every enqueue and
-- take), so a ready message is found by scanning: O(depth of the lanes searched).
-- Every write removes something; the keys written after the first are checked
-- before it.
local id, kind = ARGV[1], kind_of(ARGV[2])
NLANES = #KEYS - 3 -- (every lane: queue.go passes them all)
need(KEYS[1], 'set')
need(KEYS[2], 'zset')
local rec = redis.call('HGET', KEYS[3], id)
if rec then
  -- The delayed set's member is the record's sequence number and the id,
  -- found even when the record's routing does not parse.
  redis.call('HDEL', KEYS[3], id)
  unschedule(KEYS[2], rec, id)
  redis.call('SREM', KEYS[1], id)
  return 1
end
local off = 0
if kind == KIND_RANGE then off = SEQ_LEN end
-- A lane key of the wrong type is skipped: the others can still be searched.
local usable = lane_checker(4, kind)

-- remove takes entry e out of key (a lane, a priority's list, or a group's
-- list: then the group's count goes down and, when its list empties, its
-- marker leaves the list beside it, as a take would drop it; parkedAt is
-- the group's parked entry when its marker is parked instead). A priority's
-- list emptied leaves its segment's index.
local function remove(lane, e, key, g, list, parkedAt)
  if kind == KIND_RANGE then
    redis.call('ZREM', key, e)
    return
  end
  redis.call('LREM', key, 1, e)
  if g then
    local ready = queue_key(lane, G_READY)
    count_add(ready, g, -1)
    if redis.call('EXISTS', key) == 1 then return end
    if parkedAt then
      local kept = {}
      for entry in string.gmatch(redis.call('HGET', queue_key(lane, G_PARK), g) or '', '[^ ]+') do
        if entry ~= parkedAt then kept[#kept + 1] = entry end
      end
      if #kept > 0 then
        redis.call('HSET', queue_key(lane, G_PARK), g, table.concat(kept, ' '))
      else
        redis.call('HDEL', queue_key(lane, G_PARK), g)
        redis.pcall('ZREM', queue_key(lane, G_DUE), g) -- no park, no time
      end
      return
    end
    if redis.call('LREM', list, 1, G_MARK .. g) > 0 then count_add(ready, '', -1) end
    key = list
  end
  if kind == KIND_LISTS and redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', lane, string.sub(key, #plist_key(lane, '') + 1))
  end
end

local function matches(e) return env_id(e, off) == id end
for k = 4, #KEYS do
  local lane = KEYS[k]
  local found = false
  if usable(k - 4) then
    found = lane_each(lane, kind, function(e, key, g, list)
      if not matches(e) then return false end
      remove(lane, e, key, g, list)
      return true
    end)
  end
  if found then
    redis.call('SREM', KEYS[1], id)
    return 1
  end
end

-- The groups parked at their limit: their markers are out of the lanes.
if kind ~= KIND_RANGE and #KEYS >= 4 then
  local park = queue_key(KEYS[4], G_PARK)
  local parked = redis.pcall('HGETALL', park)
  if type(parked) == 'table' and not parked.err then
    for i = 1, #parked, 2 do
      local g = parked[i]
      for entry in string.gmatch(parked[i + 1], '[^ ]+') do
        -- (An entry that does not parse names no list: passed by here, set
        -- aside when its group is put back, inc/park.lua group_unpark.)
        local n, score = park_entry(entry, kind)
        if n then
          local lane = queue_key(KEYS[4], 'lane:' .. n)
          local list = marker_list(lane, kind, score)
          local glist = list .. G_LIST .. g
          if redis.call('TYPE', glist).ok == 'list' and each_in(glist, 'LRANGE', function(e)
            if not matches(e) then return false end
            remove(lane, e, glist, g, list, entry)
            return true
          end) then
            redis.call('SREM', KEYS[1], id)
            return 1
          end
        end
      end
    end
  end
end
return 0
