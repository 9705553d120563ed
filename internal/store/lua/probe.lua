#!lua flags=no-writes,allow-cross-slot-keys
-- probe.lua: what a MultiConsumer (multi.go) cannot learn from announcements
-- alone, for many queues of one node in one call: which have work (the
-- wake-up member, which every write that makes work ready sets and a
-- MultiConsumer's take claims: it outlives an announcement that was missed;
-- or messages in a lane while the shard is not paused: work whose wake-up a
-- consumer killed between popping it and taking took with it), the due time
-- of each one's first delayed message, its first lease deadline, and whether
-- its meta key is still there. It is the safety net under the announcements
-- (a missed one costs at most a probe's delay, never a stuck message) and the
-- clock of promotions and sweeps. The keys are of many slots of one node
-- (Redis >= 7.0 with this flag); it reads only, and a key of the wrong type
-- reads as empty.
--
-- One shard that cannot be read does not fail the others: on a cluster,
-- while a shard's slot is being moved (or once it has moved), reading one of
-- its keys that is not on this node fails ("non local key", raised even for a
-- key that exists nowhere); each read is a pcall, and such a shard is
-- reported unreadable (status 'x') and not read further.
--
-- Cost: one EXISTS over each group of keys when the queues are idle (six or
-- seven commands a call); the keys that exist are found by halving the group.
-- On a cluster, where one command may not name keys of several slots, one
-- EXISTS a key, and one over each shard's lanes (about a microsecond each).
--
-- (keys.go describes every key.) No declared keys: Redis would refuse
-- declared keys of several slots (CROSSSLOT) before the script runs; the
-- flag lets it read undeclared ones of any slot of this node.
-- ARGV[1]        n, the number of shards
-- ARGV[2]        'cluster' on a cluster, else ''
-- ARGV[3]        'meta': read the meta keys too, else ''
-- ARGV[4..3+n]   each shard's number of lanes
-- ARGV[4+n..]    the key names: the wake-up keys of the n shards, their
--                delayed keys, their leases keys, their groups' due times,
--                their paused keys (prioq:{Q}:wake, :delayed, :leases, :gdue,
--                :paused), with ARGV[3] their meta keys ('' for a shard whose
--                slot holds none: a queue of several shards keeps its meta
--                key in a slot of its own), then the lanes of each shard in
--                turn.
-- Returns 5n + 1 values: per shard, ready (1/0), its first due time (ms, ''
-- for none), its first lease deadline (ms, ''), the first time a group
-- parked at its rate limit comes back (ms, ''), its status ('' read; 'm' its
-- meta key is missing; 'x' not readable here: the other values of that
-- shard mean nothing), then the server's now (ms).
local n, cluster, metas = tonumber(ARGV[1]), ARGV[2] == 'cluster', ARGV[3] == 'meta'
local KEYS = {}
for i = 4 + n, #ARGV do KEYS[#KEYS + 1] = ARGV[i] end
local groups = metas and 6 or 5 -- key groups of n before the lanes
-- start[s]: the index in KEYS of shard s's first lane; start[n + 1] one past
-- the last lane.
local start = {groups * n + 1}
for s = 1, n do start[s + 1] = start[s] + tonumber(ARGV[3 + s]) end
local out, bad = {}, {}
for s = 1, n do out[4 * n + s] = '' end

-- exists counts the keys KEYS[from .. to] (all before the lanes) that exist:
-- on a cluster one pcall a key, a key that fails marking its shard
-- unreadable; elsewhere 1,000 keys a command (unpack takes ~8,000 values).
local function exists(from, to)
  local c = 0
  if cluster then
    for i = from, to do
      local s = (i - 1) % n + 1
      if not bad[s] and KEYS[i] ~= '' then
        local r = redis.pcall('EXISTS', KEYS[i])
        if type(r) == 'number' then c = c + r else bad[s] = true end
      end
    end
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
-- (On a cluster each key is asked alone anyway: no halving.)
local function group(off, read, none)
  for i = off + 1, off + n do out[i] = none end
  if cluster then
    for i = off + 1, off + n do
      if exists(i, i) == 1 then out[i] = read(KEYS[i]) end
    end
    return
  end
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
-- Shards whose lanes hold messages while they are not paused, found by
-- halving (a cluster: one EXISTS over each shard's lanes, one slot).
local function lanes(from, to)
  if cluster then
    for s = from, to do
      if out[s] == 0 and not bad[s] then
        local r = redis.pcall('EXISTS', unpack(KEYS, start[s], start[s + 1] - 1))
        if type(r) ~= 'number' then
          bad[s] = true
        elseif r > 0 and exists(4 * n + s, 4 * n + s) == 0 and not bad[s] then
          out[s] = 1
        end
      end
    end
    return
  end
  if start[to + 1] <= start[from] or exists(start[from], start[to + 1] - 1) == 0 then return end
  if from == to then
    if out[from] == 0 and redis.call('EXISTS', KEYS[4 * n + from]) == 0 then out[from] = 1 end
    return
  end
  local mid = math.floor((from + to) / 2)
  lanes(from, mid)
  lanes(mid + 1, to)
end
if n > 0 then lanes(1, n) end
group(n, head, '')
group(2 * n, head, '')
group(3 * n, head, '')
if metas then
  -- Every meta key there (the usual case) costs one EXISTS; a missing one
  -- is looked for key by key.
  local named, c = 0, 0
  for i = 5 * n + 1, 6 * n do
    if KEYS[i] ~= '' then named = named + 1 end
  end
  if cluster then
    c = -1 -- asked key by key below
  else
    local present = {}
    for i = 5 * n + 1, 6 * n do
      if KEYS[i] ~= '' then present[#present + 1] = KEYS[i] end
    end
    for i = 1, #present, 1000 do
      c = c + redis.call('EXISTS', unpack(present, i, math.min(i + 999, #present)))
    end
  end
  if c ~= named then
    for i = 5 * n + 1, 6 * n do
      if KEYS[i] ~= '' and exists(i, i) == 0 and not bad[i - 5 * n] then out[4 * n + i - 5 * n] = 'm' end
    end
  end
end
for s = 1, n do
  if bad[s] then out[4 * n + s] = 'x' end
end
local t = redis.call('TIME')
out[5 * n + 1] = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return out
