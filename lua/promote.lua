-- promote.lua: move due delayed messages into their lanes, up to a batch.
--
-- KEYS[1]   prioq:{Q}:delayed  ZSET  id -> due (ms)
-- KEYS[2]   prioq:{Q}:dstore   HASH  id -> "lane|score|envelope"
-- KEYS[3]   prioq:{Q}:seq      STRING FIFO counter for range segments
-- KEYS[4]   prioq:{Q}:wake     ZSET  consumer wake-up marker
-- KEYS[5..] every lane key, lane 0 first
-- ARGV[1]   now (ms)
-- ARGV[2]   batch limit
-- ARGV[3]   1 = arm the consumer wake-up (AtLeastOnce)
-- ARGV[4]   1 = lanes are lists, 2 = sorted sets
-- Returns: {moved, next due (ms) or -1 when nothing is delayed}.
-- Atomic: two promoters running at once each move a disjoint set (the second
-- sees only what the first left), so nothing is moved twice.
local now, limit, arm, kind = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
local moved = 0
if #ids > 0 then
  local vals = redis.call('HMGET', KEYS[2], unpack(ids))
  local perlane = {}
  for i, v in ipairs(vals) do
    if v then
      local p1 = string.find(v, '|', 1, true)
      local p2 = string.find(v, '|', p1 + 1, true)
      local lane = tonumber(string.sub(v, 1, p1 - 1))
      local key = KEYS[5 + lane]
      if kind == 1 then
        -- Group per lane: one RPUSH per lane per batch, in due order.
        local l = perlane[key]
        if not l then l = {}; perlane[key] = l end
        l[#l + 1] = string.sub(v, p2 + 1)
      else
        local s = redis.call('INCR', KEYS[3])
        local b = {}
        for j = 8, 1, -1 do b[j] = s % 256; s = math.floor(s / 256) end
        redis.call('ZADD', key, string.sub(v, p1 + 1, p2 - 1), string.char(unpack(b)) .. string.sub(v, p2 + 1))
      end
      moved = moved + 1
    end
  end
  for key, l in pairs(perlane) do redis.call('RPUSH', key, unpack(l)) end
  redis.call('ZREM', KEYS[1], unpack(ids))
  redis.call('HDEL', KEYS[2], unpack(ids))
  if arm and moved > 0 then redis.call('ZADD', KEYS[4], 0, 'w') end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then return {moved, tonumber(head[2])} end
return {moved, -1}
