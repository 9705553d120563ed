-- ack.lua: acknowledge deliveries whose ids were given by the producer.
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:leases    ZSET
-- KEYS[2]  prioq:{Q}:inflight  HASH
-- KEYS[3]  prioq:{Q}:ids       SET
-- KEYS[4]  prioq:{Q}:counts    HASH
-- ARGV     pairs: lease token, id ('' for a generated id)
-- Returns: one integer per pair, 1 acked, 0 lease lost (nothing changed).
-- Messages with generated ids are acked without Lua (ZREM + HDEL in a
-- pipeline); a caller id must be released only when the ack wins, which needs
-- the ZREM's answer first, hence this script. Every write removes something,
-- so acks run at maxmemory. A leases key of the wrong type fails the first
-- ZREM, before anything is written; the others are checked first.
need(KEYS[2], 'hash')
need(KEYS[3], 'set')
local out, won, ids = {}, {}, {}
for i = 1, #ARGV, 2 do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    won[#won + 1] = ARGV[i]
    if ARGV[i + 1] ~= '' then ids[#ids + 1] = ARGV[i + 1] end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
-- The ZREMs are the fences; the records and ids of the acks that won go in
-- one command each (per CHUNK), not one per message.
chunked('HDEL', KEYS[2], won)
chunked('SREM', KEYS[3], ids)
-- For rates only, last, and a wrong-typed counts key does not fail the acks.
if #won > 0 then redis.pcall('HINCRBY', KEYS[4], COUNT_ACKED, #won) end
return out
