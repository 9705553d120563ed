-- groupinflight.lua: how many messages of each group are in flight, for
-- Queue.Groups. Reads only.
--
-- include: lanes
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:leases   ZSET
-- KEYS[2]  prioq:{Q}:gflight  ZSET
-- KEYS[3]  prioq:{Q}:gpark    HASH
-- KEYS[4]  a lane key of the queue (lane 0): the group keys are its siblings
-- Returns: {group, count, group, count, ...}, the groups with a lease.
-- The groups that may have messages in flight are those a take named in
-- gflight, and those parked at their limit; each one's count is the lease
-- tokens of its gleases:G whose lease is still there (a token an ack cut
-- short left behind does not count). O(those groups + their leases): no
-- in-flight record is read, so no payload comes into Lua (reading them
-- all cost 0.6 s and 170 MB of Lua heap for 500 messages of 256 KiB). A
-- key of the wrong type counts nothing.
local out, seen = {}, {}
local function count(g)
  if seen[g] then return end
  seen[g] = true
  local toks = redis.pcall('SMEMBERS', queue_key(KEYS[4], G_LEASES .. g))
  if type(toks) ~= 'table' or toks.err or redis.call('TYPE', KEYS[1]).ok ~= 'zset' then return end
  local n = 0
  for i = 1, #toks, CHUNK do
    for _, v in ipairs(redis.call('ZMSCORE', KEYS[1], unpack(toks, i, math.min(i + CHUNK - 1, #toks)))) do
      if v then n = n + 1 end
    end
  end
  if n > 0 then
    out[#out + 1] = g
    out[#out + 1] = n
  end
end
local flying = redis.pcall('ZRANGE', KEYS[2], 0, -1)
if type(flying) == 'table' and not flying.err then
  for _, g in ipairs(flying) do count(g) end
end
local parked = redis.pcall('HKEYS', KEYS[3])
if type(parked) == 'table' and not parked.err then
  for _, g in ipairs(parked) do count(g) end
end
return out
