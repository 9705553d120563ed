-- renew.lua: move the lease deadlines of many deliveries at once (a
-- consumer's renewer, the root's renew.go), each only while its lease is
-- current: extend.lua for a batch.
--
-- include: util
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:leases     ZSET
-- KEYS[2]  prioq:{Q}:cancelled  ZSET
-- ARGV[1]  the lease (ms): a deadline becomes the server's now plus this,
--          unless it is later already (an Extend of the handler's)
-- ARGV[2..] lease tokens
-- Returns: one integer per token: 1 renewed (or later already), 0 lease
-- lost (nothing changed: a lease gone is never put back), 2 lease ended by
-- Queue.Cancel (cancelrun.lua marked the token).
-- Both keys' types are checked before any write. Each renewal's first write
-- is a ZREM (it frees memory, so the script runs at maxmemory) and the ZADD
-- after it only restores what it removed.
local _, nowc = now_ms()
local deadline = nowc + tonumber(ARGV[1]) -- before any write: a bad argument fails with nothing changed
need(KEYS[1], 'zset')
need(KEYS[2], 'zset')
local out = {}
for i = 2, #ARGV do
  local old = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if not old then
    if redis.call('ZSCORE', KEYS[2], ARGV[i]) then out[#out + 1] = 2 else out[#out + 1] = 0 end
  else
    if tonumber(old) < deadline then
      redis.call('ZREM', KEYS[1], ARGV[i])
      redis.call('ZADD', KEYS[1], deadline, ARGV[i])
    end
    out[#out + 1] = 1
  end
end
return out
