-- cancel.lua: remove one waiting message (delayed or ready) by id.
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
local found = false
for k = 4, #KEYS do
  local lane = KEYS[k]
  if usable(k - 4) then
    found = lane_each(lane, kind, function(e, key)
      if env_id(e, off) ~= id then return false end
      if kind == KIND_RANGE then
        redis.call('ZREM', key, e)
      else
        redis.call('LREM', key, 1, e)
        -- A priority's list emptied: its name leaves the index.
        if kind == KIND_LISTS and redis.call('EXISTS', key) == 0 then
          redis.call('ZREM', lane, string.sub(key, #plist_key(lane, '') + 1))
        end
      end
      return true
    end)
  end
  if found then
    redis.call('SREM', KEYS[1], id)
    return 1
  end
end
return 0
