-- sweep.lua: redeliver messages whose lease expired; re-arm a lost wake-up.
--
-- KEYS[1]   prioq:{Q}:leases    ZSET  lease token -> deadline (ms)
-- KEYS[2]   prioq:{Q}:inflight  HASH  lease token -> "lane|score|member"
-- KEYS[3]   prioq:{Q}:dead      LIST  dead-letter records
-- KEYS[4]   prioq:{Q}:wake      ZSET  consumer wake-up marker
-- KEYS[5]   prioq:{Q}:paused    LIST/ZSET sentinel while paused
-- KEYS[6..] every lane key, lane 0 first
-- ARGV[1]   now (ms)
-- ARGV[2]   most leases to handle in this call
-- ARGV[3]   max attempts
-- ARGV[4]   1 = lanes are lists, 2 = sorted sets
-- Returns: {redelivered, dead, more} where more = 1 when the limit was hit.
-- An expired message goes back to the head of its lane (a list: LPUSH; a
-- segment: its old member, whose sequence number sorts before newer ones), so
-- it is served before newer messages of its priority.
local now, limit, maxa, kind = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tokens = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
local back, dead = 0, 0
if #tokens > 0 then
  local recs = redis.call('HMGET', KEYS[2], unpack(tokens))
  local off = 0
  if kind == 2 then off = 8 end
  for _, rec in ipairs(recs) do
    if rec then
      local p1 = string.find(rec, '|', 1, true)
      local p2 = string.find(rec, '|', p1 + 1, true)
      local lane, score, member = tonumber(string.sub(rec, 1, p1 - 1)), string.sub(rec, p1 + 1, p2 - 1), string.sub(rec, p2 + 1)
      local a1, a2, a3, a4 = string.byte(member, off + 19, off + 22)
      local attempts = 0
      if a4 then attempts = ((a1 * 256 + a2) * 256 + a3) * 256 + a4 end
      if attempts >= maxa then
        local reason = 'lease expired'
        redis.call('RPUSH', KEYS[3], lane .. '|' .. score .. '|' .. now .. '|' .. #reason .. '|' .. reason .. string.sub(member, off + 1))
        dead = dead + 1
      else
        if kind == 1 then redis.call('LPUSH', KEYS[5 + lane + 1], member) else redis.call('ZADD', KEYS[5 + lane + 1], score, member) end
        back = back + 1
      end
    end
  end
  redis.call('ZREM', KEYS[1], unpack(tokens))
  redis.call('HDEL', KEYS[2], unpack(tokens))
end
-- A wake-up marker can be lost (a consumer killed right after popping it);
-- re-arm while work waits, so idle consumers never sleep on ready work.
-- Idle (nothing expired, lanes empty) this costs one EXISTS.
if back > 0 or redis.call('EXISTS', unpack(KEYS, 6)) > 0 then
  if redis.call('EXISTS', KEYS[5]) == 0 then redis.call('ZADD', KEYS[4], 0, 'w') end
end
local more = 0
if #tokens == limit then more = 1 end
return {back, dead, more}
