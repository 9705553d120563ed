-- fail.lua: end one delivery that did not succeed: retry later, dead-letter it,
-- or release it untouched.
--
-- KEYS[1]   prioq:{Q}:leases    ZSET  lease token -> deadline (ms)
-- KEYS[2]   prioq:{Q}:inflight  HASH  lease token -> "lane|score|member"
-- KEYS[3]   prioq:{Q}:delayed   ZSET  id -> due (ms)
-- KEYS[4]   prioq:{Q}:dstore    HASH  id -> "lane|score|envelope"
-- KEYS[5]   prioq:{Q}:dead      LIST  dead-letter records
-- KEYS[6]   prioq:{Q}:wake      ZSET  consumer wake-up marker
-- KEYS[7]   prioq:{Q}:sched     LIST  promoter wake-up marker
-- KEYS[8..] every lane key, lane 0 first
-- ARGV[1]   lease token
-- ARGV[2]   now (ms)
-- ARGV[3]   retry delay (ms)
-- ARGV[4]   reason (the last error)
-- ARGV[5]   max attempts
-- ARGV[6]   1 = lanes are lists, 2 = sorted sets
-- ARGV[7]   'retry', 'dead' (no more attempts), 'bury' (dead, keeping the lane
--           entry byte for byte: it did not decode) or 'release' (never
--           handled: back to the head of its lane, this delivery not counted)
-- Returns: 0 lease lost (nothing changed), 1 requeued or delayed, 2 dead.
local token, now, delay, reason, maxa, kind, op = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
if redis.call('ZREM', KEYS[1], token) == 0 then return 0 end
local rec = redis.call('HGET', KEYS[2], token)
redis.call('HDEL', KEYS[2], token)
if not rec then return 0 end
local p1 = string.find(rec, '|', 1, true)
local p2 = string.find(rec, '|', p1 + 1, true)
local lane, score, member = tonumber(string.sub(rec, 1, p1 - 1)), string.sub(rec, p1 + 1, p2 - 1), string.sub(rec, p2 + 1)
local key = KEYS[8 + lane]
local off = 0
if kind == 2 then off = 8 end
local env = string.sub(member, off + 1)
local a1, a2, a3, a4 = string.byte(env, 19, 22)
local attempts = 0
if a4 then attempts = ((a1 * 256 + a2) * 256 + a3) * 256 + a4 end

if op == 'release' then
  if a4 and attempts > 0 then
    local a = attempts - 1
    local b4 = a % 256; a = math.floor(a / 256)
    local b3 = a % 256; a = math.floor(a / 256)
    local b2 = a % 256; a = math.floor(a / 256)
    member = string.sub(member, 1, off + 18) .. string.char(a % 256, b2, b3, b4) .. string.sub(member, off + 23)
  end
  if kind == 1 then redis.call('LPUSH', key, member) else redis.call('ZADD', key, score, member) end
  redis.call('ZADD', KEYS[6], 0, 'w')
  return 1
end
if op == 'bury' then env = member end
if op == 'dead' or op == 'bury' or attempts >= maxa then
  redis.call('RPUSH', KEYS[5], lane .. '|' .. score .. '|' .. now .. '|' .. #reason .. '|' .. reason .. env)
  return 2
end
local n = string.byte(env, 23)
local id = string.sub(env, 24, 23 + n)
if delay <= 0 then
  if kind == 1 then redis.call('RPUSH', key, env) else redis.call('ZADD', key, score, member) end
  redis.call('ZADD', KEYS[6], 0, 'w')
  return 1
end
local due = now + delay
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[3], due, id)
redis.call('HSET', KEYS[4], id, lane .. '|' .. score .. '|' .. env)
if (not head[2] or due < tonumber(head[2])) and redis.call('LLEN', KEYS[7]) == 0 then
  redis.call('RPUSH', KEYS[7], '1')
end
return 1
