-- cancel.lua: remove one waiting message (delayed or ready) by id.
--
-- KEYS[1]   prioq:{Q}:ids      SET   caller-given ids of live messages
-- KEYS[2]   prioq:{Q}:delayed  ZSET  id -> due (ms)
-- KEYS[3]   prioq:{Q}:dstore   HASH  id -> "lane|score|envelope"
-- KEYS[4..] the lane keys to search, in any order
-- ARGV[1]   id
-- ARGV[2]   1 = lanes are lists, 2 = sorted sets
-- ARGV[3]   how many lane entries to read per step
-- Returns: 1 removed, 0 no waiting message has that id.
-- Cost: a delayed message is found in O(log n) through the dstore hash. Lanes
-- are not indexed by id (an index would cost a command on every enqueue and
-- take), so a ready message is found by scanning: O(depth of the lanes searched).
local id, kind, step = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('HDEL', KEYS[3], id) == 1 then
  redis.call('ZREM', KEYS[2], id)
  redis.call('SREM', KEYS[1], id)
  return 1
end
-- Envelope header: the id length is byte 23, the id starts at byte 24; a
-- segment member carries 8 bytes of sequence in front.
local off = 0
if kind == 2 then off = 8 end
for k = 4, #KEYS do
  local key = KEYS[k]
  local start = 0
  while true do
    local items
    if kind == 1 then
      items = redis.call('LRANGE', key, start, start + step - 1)
    else
      items = redis.call('ZRANGE', key, start, start + step - 1)
    end
    for _, e in ipairs(items) do
      local n = string.byte(e, off + 23)
      if n and string.sub(e, off + 24, off + 23 + n) == id then
        if kind == 1 then redis.call('LREM', key, 1, e) else redis.call('ZREM', key, e) end
        redis.call('SREM', KEYS[1], id)
        return 1
      end
    end
    if #items < step then break end
    start = start + step
  end
end
return 0
