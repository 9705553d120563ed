-- purge.lua: delete every waiting message (ready and delayed) of a queue.
--
-- include: delayed, each, envelope, index, lanes, parkentry, purgegroups, records, util
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:ids      SET
-- KEYS[2]   prioq:{Q}:delayed  ZSET
-- KEYS[3]   prioq:{Q}:dstore   HASH
-- KEYS[4]   prioq:{Q}:sched    LIST (ZSET for a shard of a queue of several)
-- KEYS[5..] every lane key
-- ARGV[1]   KIND_LEVELS, KIND_RANGE or KIND_LISTS (the priorities' lists,
--           named by the lanes, go too), or KIND_FILLED (the filled index
--           goes too)
-- ARGV[2]   2 = a shard of a queue of several, else 1
-- Returns: how many messages were deleted. In-flight and dead messages stay,
-- and so do their caller ids: only the ids of the messages deleted are
-- released, which takes reading them (O(waiting messages)) unless no caller id
-- is alive at all. Every key is checked first; every write removes something.
local kind = kind_of(ARGV[1])
NLANES = #KEYS - 4
local off = 0
if kind == KIND_RANGE then off = SEQ_LEN end
need(KEYS[1], 'set')
need(KEYS[2], 'zset')
need(KEYS[3], 'hash')
if ARGV[2] == SHARDED then need(KEYS[4], 'zset') else need(KEYS[4], 'list') end
for k = 5, #KEYS do need(KEYS[k], lane_type(kind)) end
-- Groups (groups.go): their counts and parked markers name their lists.
local gready, gpark
if kind ~= KIND_RANGE and #KEYS >= 5 then
  gready, gpark = queue_key(KEYS[5], G_READY), queue_key(KEYS[5], G_PARK)
  need(gready, 'hash')
  need(gpark, 'hash')
end

local n = redis.call('ZCARD', KEYS[2])
local plists = {} -- KIND_LISTS: the priorities' lists, deleted with the lanes
for k = 5, #KEYS do
  if kind == KIND_LEVELS then
    n = n + redis.call('LLEN', KEYS[k])
  elseif kind == KIND_RANGE then
    n = n + redis.call('ZCARD', KEYS[k])
  else
    each_in(KEYS[k], 'ZRANGE', function(prio)
      -- A member that names no priority (index_prio: "007", "x") names no
      -- list of the queue's: a key under that name is none of prioq's,
      -- left in place and not counted, as takes leave it. The index goes
      -- whole, and the member with it.
      if not index_prio(prio) then return end
      local key = plist_key(KEYS[k], prio)
      if redis.call('TYPE', key).ok == 'list' then n = n + redis.call('LLEN', key) end
      plists[#plists + 1] = key
    end)
  end
end
local glists = {}
if gready then
  local beside = plists
  if kind == KIND_LEVELS then beside = {unpack(KEYS, 5)} end
  local delta
  glists, delta = purge_group_lists(gready, gpark, KEYS[5], beside, kind)
  n = n + delta
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
    local items = {}
    lane_each(KEYS[k], kind, function(e)
      items[#items + 1] = e
      if #items == CHUNK then
        release(items, off)
        items = {}
      end
    end)
    release(items, off)
  end
  -- (lane_each went through the lanes' markers; the parked ones' lists too)
  if gready then
    for _, gl in ipairs(glists) do
      if redis.call('TYPE', gl).ok == 'list' then
        local items = {}
        each_in(gl, 'LRANGE', function(e) items[#items + 1] = e end)
        release(items, 0)
      end
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
for i = 1, #plists, CHUNK do redis.call('DEL', unpack(plists, i, math.min(i + CHUNK - 1, #plists))) end
for i = 1, #glists, CHUNK do redis.call('DEL', unpack(glists, i, math.min(i + CHUNK - 1, #glists))) end
-- (gdue: the parked groups' due times go with them; the rate logs stay,
-- and expire by themselves: a purge does not reset a rate limit.)
if gready then redis.call('DEL', gready, gpark, queue_key(KEYS[5], G_DUE)) end
-- The filled index goes with the lanes it names (DEL of any type).
if FILLED and #KEYS >= 5 then redis.call('DEL', queue_key(KEYS[5], FILLED_KEY)) end
return n
