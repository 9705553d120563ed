-- take.lua: pop the highest-priority ready messages and lease them.
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:paused    LIST/ZSET
-- KEYS[2]   prioq:{Q}:leases    ZSET
-- KEYS[3]   prioq:{Q}:inflight  HASH
-- KEYS[4]   prioq:{Q}:wake      ZSET
-- KEYS[5..] lane keys in the order to serve them (highest first, or weighted)
-- ARGV[1]   lease (ms): the deadline is the server's now plus this
-- ARGV[2]   how many to take at most (Go caps it at MaxBatch)
-- ARGV[3]   KIND_LEVELS or KIND_RANGE
-- ARGV[4]   lease token suffix, random per call
-- Returns: {} when nothing is ready, {REPLY_PAUSED} when paused, else
--          {token1, member1, token2, member2, ...}, each member as it was in
--          its lane: its attempts field counts the deliveries before this
--          one (the sweep and fail.lua count a delivery when it ends). When
--          it passed by lane keys of the wrong type, the reply ends with the
--          pair REPLY_BROKEN, "key key ..." (Go logs it).
--
-- Atomic: the pop and the lease happen together, so a consumer that dies or a
-- reply lost on the way leaves a lease that expires and redelivers; nothing is
-- ever popped without being leased.
--
-- A token is the take's time on the server's clock (13 hex digits of
-- microseconds: one script runs at a time, and each takes longer than one),
-- the message's place in the take (4 hex digits) and the random suffix.
-- Tokens sort in the order their messages were taken, which the sweep uses to
-- put expired messages back in their age order (only a backward step of the
-- server's clock can mix the order of messages taken around it), and are
-- never reused, so a stale ack cannot match a new delivery.
--
-- Cost: the hot path of the default mode, so it makes as few calls as it
-- can: the pop, one EXISTS (two when the pop took a lane's last message),
-- TIME, one ZADD, one HSET, and the wake-up only when more work waits
-- (a take of several that empties a lane pops and asks again); members are
-- passed through untouched. It does not check key types first: the pop is
-- the first write (it frees memory, so a take runs at maxmemory), and if a
-- later write fails (a key of the wrong type) the script undoes what it wrote
-- and puts the popped messages back where they were before it raises the
-- error, so it still changes nothing when it fails. A lane key of the wrong
-- type fails the pop before it pops anything; the take then asks each lane's
-- type and pops from the others, so one broken lane does not stop the rest.
local lease, count, kind, suffix = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
-- Checked before the pop: past it, a nil here would lose what was popped.
assert(lease and count and kind and suffix, 'take: bad arguments')
local FIRST = 5 -- KEYS index of the first lane
-- The lanes to pop from: nil for every lane in KEYS (the normal case, no
-- table built), else those whose key is not of the wrong type.
local lanes

-- The paused key goes first in the multi-key pop: while paused it is the first
-- non-empty key, so the pop returns its sentinel (put back below) and no lane
-- is touched. Unpaused it costs nothing: no extra command per take.
local function pop(call, paused, want)
  -- Built with unpack (one C call), not a loop: with 64 lanes the loop
  -- was a measurable part of a take.
  local args
  if lanes then
    args = {#lanes, unpack(lanes)}
    if paused then
      table.insert(args, 2, KEYS[1])
      args[1] = #lanes + 1
    end
  elseif paused then
    args = {#KEYS - FIRST + 2, KEYS[1], unpack(KEYS, FIRST)}
  else
    args = {#KEYS - FIRST + 1, unpack(KEYS, FIRST)}
  end
  local m = #args
  args[m + 2] = 'COUNT'
  args[m + 3] = want
  if kind == KIND_LEVELS then
    args[m + 1] = 'LEFT'
    return call('LMPOP', unpack(args))
  end
  args[m + 1] = 'MIN'
  return call('ZMPOP', unpack(args))
end

-- with_broken appends to a reply the lane keys of the wrong type passed by.
local broken = {}
local function with_broken(reply)
  if #broken > 0 then
    reply[#reply + 1] = REPLY_BROKEN
    reply[#reply + 1] = table.concat(broken, ' ')
  end
  return reply
end

local res = pop(redis.pcall, true, count)
if type(res) == 'table' and res.err then
  if not string.find(res.err, 'WRONGTYPE', 1, true) then error(res) end
  -- The pop checks each key it reaches before it pops anything, so nothing
  -- was written: leave out the lanes of the wrong type and pop again (a
  -- paused key of the wrong type still fails it, writing nothing).
  lanes = {}
  local want = lane_type(kind)
  for k = FIRST, #KEYS do
    local t = redis.call('TYPE', KEYS[k]).ok
    if t == 'none' or t == want then lanes[#lanes + 1] = KEYS[k] else broken[#broken + 1] = KEYS[k] end
  end
  if #lanes > 0 then res = pop(redis.call, true, count) else res = nil end
end
if not res then return with_broken({}) end
if res[1] == KEYS[1] then
  if kind == KIND_LEVELS then redis.call('RPUSH', KEYS[1], PAUSE) else redis.call('ZADD', KEYS[1], 0, PAUSE) end
  return {REPLY_PAUSED}
end

-- A pop takes from one lane. When that lane had fewer than count, the next
-- lanes in order fill the rest (one more pop per lane emptied), so that a
-- take for several consumers (Go merges them) serves all it can. Whether
-- work remains (remains, below) is needed anyway for the wake-up.
-- A later pop can fail: a lane of the wrong type after an emptied one. The
-- pop checks the type before it pops, so it wrote nothing: the take stops
-- there with what it has, as a take of one would, and leaves the wake-up set.
local pops, out = {res}, {}

-- undo puts the popped messages back at the head of their lane in their
-- order, after removing the leases made so far; then it raises err.
local function undo(err, leased, recorded)
  local tokens = {}
  for i = 1, #out, 2 do tokens[#tokens + 1] = out[i] end
  if recorded then chunked('HDEL', KEYS[3], tokens) end
  if leased then chunked('ZREM', KEYS[2], tokens) end
  for _, p in ipairs(pops) do
    local key, items = p[1], p[2]
    if kind == KIND_LEVELS then
      local rev = {}
      for j = #items, 1, -1 do rev[#rev + 1] = items[j] end
      chunked('LPUSH', key, rev)
    else
      local pairs_ = {}
      for _, it in ipairs(items) do
        pairs_[#pairs_ + 1] = it[2]
        pairs_[#pairs_ + 1] = it[1]
      end
      chunked('ZADD', key, pairs_)
    end
  end
  error(err)
end

-- remains reports whether work is left after a pop from key that took
-- fewer than asked (emptied) or all it asked: the lanes ahead of key are
-- empty (the pop took the first non-empty key), so only key and the lanes
-- after it can hold work, and one EXISTS over them asks it. With many lanes
-- after key, the popped lane is asked alone first: under load it still has
-- work, and that costs the same with 2 lanes or 64.
local function remains(key, emptied)
  local list, k = KEYS, FIRST
  if lanes then list, k = lanes, 1 end
  while list[k] ~= key do k = k + 1 end
  if emptied then k = k + 1 end
  if k > #list then return false end
  if not emptied and #list - k >= MANY_LANES then
    if redis.call('EXISTS', key) == 1 then return true end
    k = k + 1
  end
  return redis.call('EXISTS', unpack(list, k)) > 0
end

local got = #res[2]
local more = remains(res[1], got < count)
while more and got < count do
  res = pop(redis.pcall, false, count - got)
  if not res or res.err then break end -- (not res: EXISTS saw work, so never)
  pops[#pops + 1] = res
  more = remains(res[1], #res[2] < count - got)
  got = got + #res[2]
end

-- The lane index is the number that ends the popped key's name (keys.go:
-- prioq:{Q}:lane:N).
local _, nowc, us = now_ms()
local stamp = string.format('%013x', us)
local deadline = nowc + lease
local zargs, hargs = {}, {}
local i = 0
for _, p in ipairs(pops) do
  local lane = string.match(p[1], '(%d+)$')
  if not lane then undo({err = 'take: lane key without an index: ' .. p[1]}, false, false) end
  local head = lane .. '|'
  for _, item in ipairs(p[2]) do
    i = i + 1
    local member, rec
    if kind == KIND_LEVELS then
      member, rec = item, head .. '|' .. item
    else
      member, rec = item[1], head .. item[2] .. '|' .. item[1]
    end
    local token = stamp .. string.format('%04x', i) .. suffix
    zargs[2 * i - 1] = deadline
    zargs[2 * i] = token
    hargs[2 * i - 1] = token
    hargs[2 * i] = rec
    out[2 * i - 1] = token
    out[2 * i] = member
  end
end

-- Each write below fails whole or not at all (a wrong type fails the first
-- chunk; past the pop, Redis no longer refuses writes for memory).
local err = pchunked('ZADD', KEYS[2], zargs)
if err then undo(err, false, false) end
err = pchunked('HSET', KEYS[3], hargs)
if err then undo(err, true, false) end
-- When work remains, wake one more idle consumer (more: from the EXISTS
-- above). Re-arming when nothing is left would only make another consumer
-- run an empty take. The marker is a single-member set, so it cannot grow.
if more then
  local ok = redis.pcall('ZADD', KEYS[4], 0, WAKE)
  if type(ok) == 'table' and ok.err then undo(ok, true, true) end
end
return with_broken(out)
