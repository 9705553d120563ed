-- take.lua: pop the highest-priority ready messages and lease them.
--
-- KEYS[1]   prioq:{Q}:paused    LIST/ZSET holding one sentinel while paused
-- KEYS[2]   prioq:{Q}:leases    ZSET  lease token -> deadline (ms)
-- KEYS[3]   prioq:{Q}:inflight  HASH  lease token -> "lane|score|member"
-- KEYS[4]   prioq:{Q}:wake      ZSET  consumer wake-up marker
-- KEYS[5..] lane keys in the order to serve them (highest first, or weighted)
-- ARGV[1]   now (ms)
-- ARGV[2]   lease (ms)
-- ARGV[3]   how many to take at most
-- ARGV[4]   1 = lanes are lists, 2 = sorted sets
-- ARGV[5]   lease token prefix, unique per call (tokens are prefix:1, prefix:2, ...)
-- Returns: {} when nothing is ready, {'paused'} when paused, else
--          {token1, member1, token2, member2, ...} with the attempts field of
--          each envelope already counting this delivery.
-- Atomic: the pop and the lease happen together, so a consumer that dies or a
-- reply lost on the way leaves a lease that expires and redelivers; nothing is
-- ever popped without being leased.
local now, lease, count, kind, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]

-- The paused key goes first in the multi-key pop: while paused it is the first
-- non-empty key, so the pop returns its sentinel (put back below) and no lane
-- is touched. Unpaused it costs nothing: no extra command per take.
local args = {#KEYS - 3, KEYS[1]}
for k = 5, #KEYS do args[#args + 1] = KEYS[k] end
local res
if kind == 1 then
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
  if kind == 1 then redis.call('RPUSH', KEYS[1], 'p') else redis.call('ZADD', KEYS[1], 0, 'p') end
  return {'paused'}
end

-- The lane index is the number that ends the popped key's name (keys.go:
-- prioq:{Q}:lane:N). Reading it back is O(1); a lookup would cost O(lanes).
local lane = string.match(res[1], '(%d+)$')
local off = 0
if kind == 2 then off = 8 end
local deadline = now + lease
local zargs, hargs, out = {}, {}, {}
for i, item in ipairs(res[2]) do
  local member, score = item, ''
  if kind == 2 then member, score = item[1], item[2] end
  -- attempts: 4 bytes big-endian at envelope offset 18 (1-based 19..22).
  local a1, a2, a3, a4 = string.byte(member, off + 19, off + 22)
  if a4 then
    local a = ((a1 * 256 + a2) * 256 + a3) * 256 + a4 + 1
    local b4 = a % 256; a = math.floor(a / 256)
    local b3 = a % 256; a = math.floor(a / 256)
    local b2 = a % 256; a = math.floor(a / 256)
    member = string.sub(member, 1, off + 18) .. string.char(a % 256, b2, b3, b4) .. string.sub(member, off + 23)
  end
  -- A member too short to hold the field is corrupt: lease it unchanged and let
  -- the consumer, which decodes it, send it to the dead-letter list.
  local token = prefix .. ':' .. i
  zargs[#zargs + 1] = deadline
  zargs[#zargs + 1] = token
  hargs[#hargs + 1] = token
  hargs[#hargs + 1] = lane .. '|' .. score .. '|' .. member
  out[#out + 1] = token
  out[#out + 1] = member
end
redis.call('ZADD', KEYS[2], unpack(zargs))
redis.call('HSET', KEYS[3], unpack(hargs))
-- Work may remain: wake one more idle consumer. It is a single-member set, so
-- it cannot grow; a consumer woken for nothing takes nothing and sleeps again.
redis.call('ZADD', KEYS[4], 0, 'w')
return out
