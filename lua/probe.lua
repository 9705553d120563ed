#!lua flags=no-writes,allow-cross-slot-keys
-- probe.lua: what a MultiConsumer (multi.go) cannot learn from announcements
-- alone, for many queues of one node in one call: which have work announced
-- (the wake-up member, which every write that makes work ready sets and a
-- MultiConsumer's take claims: it outlives an announcement that was missed),
-- the due time of each one's first delayed message, and its first lease
-- deadline. It is the safety net under the announcements (a missed one costs
-- a probe's delay, never a stuck message) and the clock of promotions and
-- sweeps. The keys are of many slots of one node (Redis >= 7.0 with this
-- flag); it reads only, and a key of the wrong type reads as empty.
--
-- Cost: one EXISTS over each group of keys when the queues are idle (four
-- commands a call); the keys that exist are found by halving the group. On
-- a cluster, one EXISTS a key (about a microsecond each).
--
-- The lanes are read too, for work whose wake-up was lost (a consumer
-- killed between popping it and taking): ready is 1 when the wake-up is set
-- or a lane holds messages and the shard is not paused.
--
-- (keys.go describes every key.) No declared keys: Redis would refuse
-- declared keys of several slots (CROSSSLOT) before the script runs; the
-- flag lets it read undeclared ones of any slot of this node. ARGV: n; how
-- many lane counts follow (0, or n in a deep probe); 'cluster' on a cluster, where
-- one command may still not name keys of several slots (EXISTS is then
-- asked key by key), else ''; the lane counts; then the key names: the wake-up keys of n shards, their delayed keys, their
-- leases keys, their groups' due times (prioq:{Q}:wake, :delayed, :leases,
-- :gdue) and, in a deep probe, their paused keys, then the lanes of each
-- shard in turn (the lanes cost the most: a consumer reads them every few
-- probes).
-- Returns 4n + 1 values: ready (1/0) per shard, its first due time (ms, ''
-- for none), its first lease deadline, the first time a group parked at its
-- rate limit comes back (ms, ''), then the server's now (ms).
local n, counts, cluster = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == 'cluster'
local KEYS = {}
for i = 4 + counts, #ARGV do KEYS[#KEYS + 1] = ARGV[i] end
local out = {}
-- exists counts the keys KEYS[from .. to] that exist, CHUNK keys a call
-- (unpack takes ~8,000 values).
local function exists(from, to)
  local c = 0
  if cluster then
    for i = from, to do c = c + redis.call('EXISTS', KEYS[i]) end
    return c
  end
  for i = from, to, 1000 do
    c = c + redis.call('EXISTS', unpack(KEYS, i, math.min(i + 999, to)))
  end
  return c
end
local function head(key)
  local h = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
  if type(h) == 'table' and h[2] then return h[2] end
  return ''
end
-- group fills out[off+1 .. off+n] with read(key) for the keys KEYS[off+1 ..
-- off+n] that exist and none for the others, finding those by halving: a
-- few queues busy among thousands cost a few EXISTS each, not a read each.
local function group(off, read, none)
  for i = off + 1, off + n do out[i] = none end
  local function find(from, to)
    local c = exists(from, to)
    if c == 0 then return end
    if to - from < 8 or c * 2 > to - from then
      for i = from, to do
        if redis.call('EXISTS', KEYS[i]) == 1 then out[i] = read(KEYS[i]) end
      end
      return
    end
    local mid = math.floor((from + to) / 2)
    find(from, mid)
    find(mid + 1, to)
  end
  find(off + 1, off + n)
end
group(0, function() return 1 end, 0)
-- Shards whose lanes hold messages, found by halving too (start[i]: the
-- first lane key of shard i).
local start = {5 * n + 1}
for i = 1, counts do start[i + 1] = start[i] + tonumber(ARGV[i + 3]) end
local function lanes(from, to)
  if start[to + 1] <= start[from] or exists(start[from], start[to + 1] - 1) == 0 then return end
  if from == to then
    if out[from] == 0 and redis.call('EXISTS', KEYS[4 * n + from]) == 0 then out[from] = 1 end
    return
  end
  local mid = math.floor((from + to) / 2)
  lanes(from, mid)
  lanes(mid + 1, to)
end
if n > 0 and #KEYS > 4 * n then lanes(1, n) end
group(n, head, '')
group(2 * n, head, '')
group(3 * n, head, '')
local t = redis.call('TIME')
out[4 * n + 1] = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return out
