-- take.lua: pop the highest-priority ready messages and lease them.
--
-- KEYS[1]   prioq:{Q}:paused    LIST/ZSET holding one sentinel while paused
-- KEYS[2]   prioq:{Q}:leases    ZSET  lease token -> deadline (ms)
-- KEYS[3]   prioq:{Q}:inflight  HASH  lease token -> "lane|score|member"
-- KEYS[4]   prioq:{Q}:wake      ZSET  consumer wake-up marker
-- KEYS[5..] lane keys in the order to serve them (highest first, or weighted)
-- ARGV[1]   lease (ms): the deadline is the server's now plus this
-- ARGV[2]   how many to take at most (Go caps it at MaxBatch)
-- ARGV[3]   KIND_LEVELS or KIND_RANGE
-- ARGV[4]   lease token prefix, unique per call (tokens are prefix:00001, prefix:00002, ...)
-- Returns: {} when nothing is ready, {REPLY_PAUSED} when paused, else
--          {token1, member1, token2, member2, ...}, each member as it was in
--          its lane: its attempts field counts the deliveries before this
--          one (the sweep and fail.lua count a delivery when it ends).
--
-- Atomic: the pop and the lease happen together, so a consumer that dies or a
-- reply lost on the way leaves a lease that expires and redelivers; nothing is
-- ever popped without being leased.
--
-- Cost: the hot path of the default mode, so it makes as few calls as it
-- can: the pop, TIME, one ZADD, one HSET, one EXISTS, and the wake-up only
-- when more work waits; members are passed through untouched. It does not check key types
-- first: the pop is the first write (it frees memory, so a take runs at
-- maxmemory), and if a later write fails (a key of the wrong type) the script
-- undoes what it wrote and puts the popped messages back where they were
-- before it raises the error, so it still changes nothing when it fails.
local lease, count, kind, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

-- The paused key goes first in the multi-key pop: while paused it is the first
-- non-empty key, so the pop returns its sentinel (put back below) and no lane
-- is touched. Unpaused it costs nothing: no extra command per take. (A lane of
-- the wrong type fails the pop before it writes, unless a lane ahead of it
-- had messages; then it is not touched.)
local args = {#KEYS - 3, KEYS[1]}
for k = 5, #KEYS do args[#args + 1] = KEYS[k] end
local res
if kind == KIND_LEVELS then
  args[#args + 1] = 'LEFT'
  args[#args + 1] = 'COUNT'
  args[#args + 1] = count
  res = redis.call('LMPOP', unpack(args))
else
  args[#args + 1] = 'MIN'
  args[#args + 1] = 'COUNT'
  args[#args + 1] = count
  res = redis.call('ZMPOP', unpack(args))
end
if not res then return {} end
local key, items = res[1], res[2]
if key == KEYS[1] then
  if kind == KIND_LEVELS then redis.call('RPUSH', key, PAUSE) else redis.call('ZADD', key, 0, PAUSE) end
  return {REPLY_PAUSED}
end

-- The lane index is the number that ends the popped key's name (keys.go:
-- prioq:{Q}:lane:N). Reading it back is O(1); a lookup would cost O(lanes).
local lane = string.match(key, '(%d+)$')
local _, nowc = now_ms()
local deadline = nowc + lease
local zargs, hargs, out = {}, {}, {}
local head = lane .. '|'
for i, item in ipairs(items) do
  local member, rec
  if kind == KIND_LEVELS then
    member, rec = item, head .. '|' .. item
  else
    member, rec = item[1], head .. item[2] .. '|' .. item[1]
  end
  -- Zero-padded, so that the tokens of one take sort in take order (the
  -- sweep reads expired leases of equal deadline in member order).
  local token = prefix .. ':' .. string.format('%05d', i)
  zargs[2 * i - 1] = deadline
  zargs[2 * i] = token
  hargs[2 * i - 1] = token
  hargs[2 * i] = rec
  out[2 * i - 1] = token
  out[2 * i] = member
end

-- undo puts the popped messages back at the head of their lane in their
-- order, after removing the leases made so far; then it raises err.
local function undo(err, leased, recorded)
  local tokens = {}
  for i = 1, #out, 2 do tokens[#tokens + 1] = out[i] end
  if recorded then chunked('HDEL', KEYS[3], tokens) end
  if leased then chunked('ZREM', KEYS[2], tokens) end
  if kind == KIND_LEVELS then
    local rev = {}
    for i = #items, 1, -1 do rev[#rev + 1] = items[i] end
    chunked('LPUSH', key, rev)
  else
    local pairs_ = {}
    for _, it in ipairs(items) do
      pairs_[#pairs_ + 1] = it[2]
      pairs_[#pairs_ + 1] = it[1]
    end
    chunked('ZADD', key, pairs_)
  end
  error(err)
end

-- Each write below fails whole or not at all (a wrong type fails the first
-- chunk; past the pop, Redis no longer refuses writes for memory).
for i = 1, #zargs, CHUNK do
  local ok = redis.pcall('ZADD', KEYS[2], unpack(zargs, i, math.min(i + CHUNK - 1, #zargs)))
  if type(ok) == 'table' and ok.err then undo(ok, false, false) end
end
for i = 1, #hargs, CHUNK do
  local ok = redis.pcall('HSET', KEYS[3], unpack(hargs, i, math.min(i + CHUNK - 1, #hargs)))
  if type(ok) == 'table' and ok.err then undo(ok, true, false) end
end
-- When work remains, wake one more idle consumer: work remains when the
-- popped lane, or a lane served after it, still has messages.
-- Re-arming when nothing is left would only make another consumer run an
-- empty take. The marker is a single-member set, so it cannot grow.
-- The lanes ahead of the popped one are empty (the pop took the first
-- non-empty key), so an EXISTS over every lane asks exactly that.
local more = redis.call('EXISTS', unpack(KEYS, 5)) > 0
if more then
  local ok = redis.pcall('ZADD', KEYS[4], 0, WAKE)
  if type(ok) == 'table' and ok.err then undo(ok, true, true) end
end
return out
