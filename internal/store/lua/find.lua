-- find.lua: read a bounded piece of one key for the entries that hold an
-- id (Shard.Find). Writes nothing.
--
-- (keys.go describes every key. It touches only the keys it declares, so it
-- is not fenced: Shard.Find builds the names of the lists it searches.)
-- KEYS[1]   the key searched: a LIST (a lane of Levels, a priority's list, a
--           group's list, the dead letters), a ZSET (a segment of a Range
--           queue stored before format 4: messages are its members), or the
--           in-flight HASH
-- KEYS[2]   HASH only: prioq:{Q}:leases  ZSET
-- ARGV[1]   the id
-- ARGV[2]   the type KEYS[1] must have: list, zset or hash
-- ARGV[3]   where to go on: a LIST or ZSET, how many entries counted from
--           its tail were searched already; the HASH, an HSCAN cursor
-- ARGV[4]   how many entries to read at most (HSCAN's COUNT for the HASH;
--           a LIST or ZSET: fewer once 1 MiB of them was read)
-- Returns: {status, next, length, hits, ...}: status "ok", "none" (no such
-- key) or "wrong" (of another type: the caller passes it by); next, where
-- to go on ("" when the key is searched to its head, or the HSCAN cursor,
-- "0" at its end); length, the key's length now; hits, how many hits
-- follow, each as three strings (a LIST or ZSET: the entry's place counted
-- from the head, 0 the next served; the HASH: its field, the lease token),
-- the entry, and (HASH) the lease deadline or ""; then the groups whose
-- markers the entries read were (a LIST only).
--
-- An entry is a hit when the id's bytes are in it: the caller decodes it
-- and checks (a payload may hold the id too; a damaged record is passed by).
-- A LIST or ZSET is read from its tail towards its head, so that what takes
-- pop (its head) and what producers push (its tail) moves no entry not yet
-- read past the ones read: across calls, only a removal in the part already
-- read (a Cancel) or a push at the tail of an entry taken before it was
-- read can hide an entry.
local key, id, want = KEYS[1], ARGV[1], ARGV[2]
local at, budget = ARGV[3], tonumber(ARGV[4])
local t = redis.call('TYPE', key).ok
if t == 'none' then return {'none', '', '0', '0'} end
if t ~= want then return {'wrong', '', '0', '0'} end

local out = {}
local hits = 0
local function hit(place, entry, score)
  out[#out + 1], out[#out + 2], out[#out + 3] = place, entry, score
  hits = hits + 1
end

if t == 'hash' then
  local r = redis.call('HSCAN', key, at, 'COUNT', budget)
  local kv = r[2]
  for i = 1, #kv, 2 do
    if string.find(kv[i + 1], id, 1, true) then
      hit(kv[i], kv[i + 1], redis.call('ZSCORE', KEYS[2], kv[i]) or '')
    end
  end
  local head = {'ok', r[1], tostring(redis.call('HLEN', key)), tostring(hits)}
  for _, v in ipairs(out) do head[#head + 1] = v end
  return head
end

local done = tonumber(at)
local n
if t == 'list' then n = redis.call('LLEN', key) else n = redis.call('ZCARD', key) end
-- Steps towards the head, until budget entries or BYTES bytes were read
-- (large payloads: each entry read is copied into Lua), or the head.
-- The first step reads 2 entries; the next ones as many as the entries
-- read so far say fit in what is left of BYTES.
local BYTES = 1048576
local groups = {}
local read, bytes, first, step = 0, 0, n - done, 2
while read < budget and bytes < BYTES and first > 0 do
  local last = first - 1
  first = math.max(first - math.min(step, budget - read), 0)
  local items
  if t == 'list' then
    items = redis.call('LRANGE', key, first, last)
  else
    items = redis.call('ZRANGE', key, first, last)
  end
  for i, e in ipairs(items) do
    bytes = bytes + #e
    -- A group's marker (inc/each.lua marker_group) stands for its list.
    local g = t == 'list' and string.sub(e, 1, 1) == G_MARK and #e <= 129 and string.match(e, '^.([!-~]+)$')
    if g then
      groups[#groups + 1] = g
    elseif string.find(e, id, 1, true) then
      hit(tostring(first + i - 1), e, '')
    end
  end
  read = read + (last - first + 1)
  step = math.max(1, math.floor((BYTES - bytes) * read / math.max(bytes, 1)))
end
local next = ''
if first > 0 then next = tostring(done + read) end
local head = {'ok', next, tostring(n), tostring(hits)}
for _, v in ipairs(out) do head[#head + 1] = v end
for _, g in ipairs(groups) do head[#head + 1] = g end
return head
