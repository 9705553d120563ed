-- ack.lua: acknowledge deliveries whose ids were given by the producer (of
-- a group or not).
--
-- include: groupend, lanes, parkentry, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:leases    ZSET
-- KEYS[2]  prioq:{Q}:inflight  HASH
-- KEYS[3]  prioq:{Q}:ids       SET
-- KEYS[4]  prioq:{Q}:counts    HASH
-- KEYS[5]  prioq:{Q}:wake      ZSET
-- KEYS[6]  a lane key of the queue (lane 0): the group keys are its siblings
-- ARGV[1]  KIND_LEVELS, KIND_LISTS, KIND_FILLED or KIND_LISTS_FILLED
-- ARGV[2]  how many lanes the queue has (NLANES)
-- ARGV[3..] triples: lease token, id ('' for a generated id), group ('' for
--          none)
-- Returns: one integer per triple, 1 acked, 0 lease lost (nothing changed).
-- Messages with generated ids are acked without Lua (ZREM + HDEL in a
-- pipeline, and for a group SREM of the token from its leases, idempotent);
-- a caller id must be released only when the ack wins, which needs the
-- ZREM's answer first, hence this script. Every write removes something but a group's
-- parked markers going back to their lanes (group_done), after the acks, so
-- acks run at maxmemory. A leases key of the wrong type fails the first ZREM,
-- before anything is written; the others are checked first.
need(KEYS[2], 'hash')
need(KEYS[3], 'set')
local kind = kind_of(ARGV[1])
NLANES = tonumber(ARGV[2])
local out, won, ids, groups = {}, {}, {}, {}
for i = 3, #ARGV, 3 do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    won[#won + 1] = ARGV[i]
    if ARGV[i + 1] ~= '' then ids[#ids + 1] = ARGV[i + 1] end
    if ARGV[i + 2] ~= '' then groups[#groups + 1] = {ARGV[i + 2], ARGV[i]} end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
-- The ZREMs are the fences; the records and ids of the acks that won go in
-- one command each (per CHUNK), not one per message.
chunked('HDEL', KEYS[2], won)
chunked('SREM', KEYS[3], ids)
-- For rates only, and a wrong-typed counts key does not fail the acks.
if #won > 0 then redis.pcall('HINCRBY', KEYS[4], COUNT_ACKED, #won) end
-- Each group's slot comes back (group_ended), and with it its markers
-- parked at its limit: then a consumer is woken.
local unparked = false
for _, g in ipairs(groups) do
  if group_ended(KEYS[6], kind, g[1], g[2]) then unparked = true end
end
if unparked then try_arm(KEYS[5], nil) end
return out
