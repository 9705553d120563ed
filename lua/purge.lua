-- purge.lua: delete every waiting message (ready and delayed) of a queue.
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:ids      SET
-- KEYS[2]   prioq:{Q}:delayed  ZSET
-- KEYS[3]   prioq:{Q}:dstore   HASH
-- KEYS[4]   prioq:{Q}:sched    LIST (ZSET for a shard of a queue of several)
-- KEYS[5..] every lane key
-- ARGV[1]   1 = lanes are lists, 2 = sorted sets
-- ARGV[2]   2 = a shard of a queue of several, else 1
-- Returns: how many messages were deleted. In-flight and dead messages stay,
-- and so do their caller ids: only the ids of the messages deleted are
-- released, which takes reading them (O(waiting messages)) unless no caller id
-- is alive at all. Every key is checked first; every write removes something.
local kind = tonumber(ARGV[1])
local off = 0
if kind == KIND_RANGE then off = SEQ_LEN end
need(KEYS[1], 'set')
need(KEYS[2], 'zset')
need(KEYS[3], 'hash')
if ARGV[2] == SHARDED then need(KEYS[4], 'zset') else need(KEYS[4], 'list') end
for k = 5, #KEYS do need(KEYS[k], lane_type(kind)) end

local n = redis.call('ZCARD', KEYS[2])
for k = 5, #KEYS do
  if kind == KIND_LEVELS then n = n + redis.call('LLEN', KEYS[k]) else n = n + redis.call('ZCARD', KEYS[k]) end
end
if redis.call('SCARD', KEYS[1]) > 0 then
  -- Release the caller ids of what is deleted, a chunk at a time.
  local function release(entries, eoff)
    local ids = {}
    for _, e in ipairs(entries) do
      local id, caller = env_id(e, eoff)
      if id and caller then ids[#ids + 1] = id end
    end
    if #ids > 0 then chunked('SREM', KEYS[1], ids) end
  end
  for k = 5, #KEYS do
    for start = 0, math.huge, CHUNK do
      local items = lane_range(KEYS[k], kind, start, start + CHUNK - 1)
      release(items, off)
      if #items < CHUNK then break end
    end
  end
  for start = 0, math.huge, CHUNK do
    local members = redis.call('ZRANGE', KEYS[2], start, start + CHUNK - 1)
    local ids = {}
    for i, m in ipairs(members) do ids[i] = delayed_id(m) end
    local recs, damaged = {}, {}
    for i, v in ipairs(hmget(KEYS[3], ids)) do
      local lane, _, rest = routed(v, #KEYS - 4, kind)
      if lane then
        recs[#recs + 1] = rest
      elseif v then
        -- The record is stored under this id, so the id is this message's,
        -- whatever its envelope says: release it with the record.
        damaged[#damaged + 1] = ids[i]
      end
    end
    release(recs, SEQ_LEN)
    if #damaged > 0 then chunked('SREM', KEYS[1], damaged) end
    if #members < CHUNK then break end
  end
end
redis.call('DEL', unpack(KEYS, 2))
return n
