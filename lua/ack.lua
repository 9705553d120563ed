-- ack.lua: acknowledge deliveries whose ids were given by the producer.
--
-- KEYS[1]  prioq:{Q}:leases    ZSET  lease token -> deadline (ms)
-- KEYS[2]  prioq:{Q}:inflight  HASH  lease token -> "lane|score|member"
-- KEYS[3]  prioq:{Q}:ids       SET   caller-given ids of live messages
-- ARGV     pairs: lease token, id ('' for a generated id)
-- Returns: one integer per pair, 1 acked, 0 lease lost (nothing changed).
-- Messages with generated ids are acked without Lua (ZREM + HDEL in a
-- pipeline); a caller id must be released only when the ack wins, which needs
-- the ZREM's answer first, hence this script. Every write removes something,
-- so acks run at maxmemory. A leases key of the wrong type fails the first
-- ZREM, before anything is written; the others are checked first.
need(KEYS[2], 'hash')
need(KEYS[3], 'set')
local out = {}
for i = 1, #ARGV, 2 do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('HDEL', KEYS[2], ARGV[i])
    if ARGV[i + 1] ~= '' then redis.call('SREM', KEYS[3], ARGV[i + 1]) end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
