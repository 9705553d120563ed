-- dead.lua: requeue or purge dead-letter records.
--
-- KEYS[1]   prioq:{Q}:dead  LIST  records "lane|score|died|reasonlen|reason" .. envelope
-- KEYS[2]   prioq:{Q}:ids   SET   caller-given ids of live messages
-- KEYS[3]   prioq:{Q}:seq   STRING FIFO counter for range segments
-- KEYS[4]   prioq:{Q}:wake  ZSET  consumer wake-up marker
-- KEYS[5..] every lane key, lane 0 first
-- ARGV[1]   'requeue' or 'purge'
-- ARGV[2]   id to act on, or '' for every record
-- ARGV[3]   1 = lanes are lists, 2 = sorted sets
-- ARGV[4]   1 = arm the consumer wake-up
-- Returns: how many records were handled. A requeued message keeps its id,
-- starts again at 0 attempts and goes to the tail of its lane. A purged one
-- releases its caller id.
local op, want, kind, arm = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local recs = redis.call('LRANGE', KEYS[1], 0, -1)
local n = 0
for _, rec in ipairs(recs) do
  local p1 = string.find(rec, '|', 1, true)
  local p2 = string.find(rec, '|', p1 + 1, true)
  local p3 = string.find(rec, '|', p2 + 1, true)
  local p4 = string.find(rec, '|', p3 + 1, true)
  local rlen = tonumber(string.sub(rec, p3 + 1, p4 - 1))
  local env = string.sub(rec, p4 + 1 + rlen)
  local idn = string.byte(env, 23) or 0
  local id = string.sub(env, 24, 23 + idn)
  if want == '' or want == id then
    redis.call('LREM', KEYS[1], 1, rec)
    if op == 'requeue' then
      local lane, score = tonumber(string.sub(rec, 1, p1 - 1)), string.sub(rec, p1 + 1, p2 - 1)
      env = string.sub(env, 1, 18) .. string.char(0, 0, 0, 0) .. string.sub(env, 23)
      local key = KEYS[5 + lane]
      if kind == 1 then
        redis.call('RPUSH', key, env)
      else
        local s = redis.call('INCR', KEYS[3])
        local b = {}
        for j = 8, 1, -1 do b[j] = s % 256; s = math.floor(s / 256) end
        redis.call('ZADD', key, score, string.char(unpack(b)) .. env)
      end
    else
      redis.call('SREM', KEYS[2], id)
    end
    n = n + 1
    if want ~= '' then break end
  end
end
if arm and op == 'requeue' and n > 0 then redis.call('ZADD', KEYS[4], 0, 'w') end
return n
