#!lua flags=no-writes,allow-cross-slot-keys
-- probe.lua: what a MultiConsumer (multi.go) cannot learn from announcements
-- alone, for many queues of one node in one call: which have ready work, the
-- due time of each one's first delayed message, and its first lease deadline.
-- It is the safety net under the announcements (a missed one costs a probe's
-- delay, never a stuck message) and the clock of promotions and sweeps.
-- The keys are of many slots of one node (Redis >= 7.0 with this flag); it
-- reads only, and a key of the wrong type reads as empty.
--
-- (keys.go describes every key.) For each shard, in ARGV's order:
-- KEYS      prioq:{Q}:paused, prioq:{Q}:delayed, prioq:{Q}:leases, then its lanes
-- ARGV[i]   how many lanes the i-th shard has
-- Returns:  for each shard 1 (ready work and not paused) or 0, the first due
--           time ('' for none) and the first lease deadline ('' for none);
--           then the server's now, all in unix ms.
local out = {}
local k = 1
local function head(key)
  local h = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
  if type(h) == 'table' and h[2] then return h[2] end
  return ''
end
for i = 1, #ARGV do
  local lanes = tonumber(ARGV[i])
  local ready = 0
  if redis.call('EXISTS', KEYS[k]) == 0 then
    for j = k + 3, k + 2 + lanes do
      if redis.call('EXISTS', KEYS[j]) == 1 then
        ready = 1
        break
      end
    end
  end
  out[#out + 1] = ready
  out[#out + 1] = head(KEYS[k + 1])
  out[#out + 1] = head(KEYS[k + 2])
  k = k + 3 + lanes
end
local t = redis.call('TIME')
out[#out + 1] = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return out
