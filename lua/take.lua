-- take.lua: pop the highest-priority ready messages and lease them.
--
-- KEYS[1]   prioq:{Q}:paused    LIST/ZSET holding one sentinel while paused
-- KEYS[2]   prioq:{Q}:leases    ZSET  lease token -> deadline (ms)
-- KEYS[3]   prioq:{Q}:inflight  HASH  lease token -> "lane|score|member"
-- KEYS[4]   prioq:{Q}:wake      ZSET  consumer wake-up marker
-- KEYS[5..] lane keys in the order to serve them (highest first, or weighted)
-- ARGV[1]   lease (ms): the deadline is the server's now plus this
-- ARGV[2]   how many to take at most (Go caps it at MaxBatch)
-- ARGV[3]   1 = lanes are lists, 2 = sorted sets
-- ARGV[4]   lease token prefix, unique per call (tokens are prefix:00001, prefix:00002, ...)
-- Returns: {} when nothing is ready, {'paused'} when paused, else
--          {token1, member1, token2, member2, ...} with the attempts field of
--          each envelope already counting this delivery.
-- Atomic: the pop and the lease happen together, so a consumer that dies or a
-- reply lost on the way leaves a lease that expires and redelivers; nothing is
-- ever popped without being leased. The pop is the first write, and it frees
-- memory, so a take runs at maxmemory; the keys written after it are checked
-- before it.
local lease, count, kind, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
need(KEYS[2], 'zset')
need(KEYS[3], 'hash')
need(KEYS[4], 'zset')

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
if res[1] == KEYS[1] then
  if kind == KIND_LEVELS then redis.call('RPUSH', KEYS[1], PAUSE) else redis.call('ZADD', KEYS[1], 0, PAUSE) end
  return {REPLY_PAUSED}
end

-- The lane index is the number that ends the popped key's name (keys.go:
-- prioq:{Q}:lane:N). Reading it back is O(1); a lookup would cost O(lanes).
local lane = string.match(res[1], '(%d+)$')
local off = 0
if kind == KIND_RANGE then off = SEQ_LEN end
local _, nowc = now_ms()
local deadline = nowc + lease
local zargs, hargs, out = {}, {}, {}
for i, item in ipairs(res[2]) do
  local member, score = item, ''
  if kind == KIND_RANGE then member, score = item[1], item[2] end
  -- A member too short to hold the field is corrupt: lease it unchanged and let
  -- the consumer, which decodes it, send it to the dead-letter list.
  local a = attempts(member, off)
  if a then member = with_attempts(member, off, a + 1) end
  -- Zero-padded, so that the tokens of one take sort in take order (the
  -- sweep reads expired leases of equal deadline in member order).
  local token = prefix .. ':' .. string.format('%05d', i)
  zargs[#zargs + 1] = deadline
  zargs[#zargs + 1] = token
  hargs[#hargs + 1] = token
  hargs[#hargs + 1] = lane .. '|' .. score .. '|' .. member
  out[#out + 1] = token
  out[#out + 1] = member
end
chunked('ZADD', KEYS[2], zargs)
chunked('HSET', KEYS[3], hargs)
-- Work may remain: wake one more idle consumer. It is a single-member set, so
-- it cannot grow; a consumer woken for nothing takes nothing and sleeps again.
redis.call('ZADD', KEYS[4], 0, WAKE)
return out
