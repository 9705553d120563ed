-- worker.lua: a consumer's heartbeat in the worker registry, or its goodbye.
--
-- (keys.go describes every key: the registry's keys share the hash tag
-- {workers}, so this script is legal on a cluster and touches only what it
-- declares: it is not fenced.)
-- KEYS[1]   prioq:{workers}:index   ZSET  worker id -> its record's expiry (server ms)
-- KEYS[2]   prioq:{workers}:w:<id>  STRING the record (JSON written by Go)
-- KEYS[3]   prioq:{workers}:q:<id>  STRING the names of the queues it serves (JSON)
-- ARGV[1]   the worker's id
-- ARGV[2]   time to live of its keys (ms), or 0: it says goodbye, its keys go
-- ARGV[3]   the record
-- ARGV[4]   the queue names, or '' when they did not change since the last
--           heartbeat (then their key's life is extended)
-- Returns: 'ok', or 'queues' when ARGV[4] was ''
-- and the names' key was gone (a restart without persistence, an eviction):
-- the caller sends them again at once. A registry key of the wrong type is an
-- error before any write (nothing written).
--
-- Cannot fail after its first write: the types are checked first, and Redis
-- refuses a write for maxmemory only at a script's first one (the SET of
-- the record: a full Redis refuses the heartbeat whole).
local index, rec, names = KEYS[1], KEYS[2], KEYS[3]
local id, ttl = ARGV[1], tonumber(ARGV[2])
for i, want in ipairs({'zset', 'string', 'string'}) do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE prioq: worker registry key ' .. KEYS[i] .. ' is a ' .. t)
  end
end
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if ttl == 0 then
  redis.call('ZREM', index, id)
  redis.call('DEL', rec, names)
  return 'ok'
end
-- The record first: at maxmemory Redis refuses it, the script's first
-- write, and so the whole heartbeat (any write before it would let every
-- later one through: the registry must not grow a full Redis).
redis.call('SET', rec, ARGV[3], 'PX', ttl)
-- Entries of workers that died without a goodbye: their records expired.
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
redis.call('ZADD', index, now + ttl, id)
if ARGV[4] ~= '' then
  redis.call('SET', names, ARGV[4], 'PX', ttl)
elseif redis.call('PEXPIRE', names, ttl) == 0 then
  return 'queues'
end
return 'ok'
