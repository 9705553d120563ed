-- runnow.lua: make one delayed message due now (Queue.RunNow).
--
-- (keys.go describes every key.)
-- include: util, wake
-- KEYS[1]   prioq:{Q}:delayed   ZSET
-- KEYS[2]   prioq:{Q}:dstore    HASH
-- KEYS[3]   prioq:{Q}:sched     LIST (ZSET for a shard of a queue of several)
-- KEYS[4]   prioq:{Q}:wake      ZSET (its name is the announcements' channel)
-- ARGV[1]   the message's id
-- ARGV[2]   YES for a shard of a queue of several
-- Returns: 1 when the message was delayed here and is due now, 0 when no
-- delayed message of this shard has the id (never, promoted, cancelled).
--
-- Its due time becomes the server's now (a ZADD XX: a member promoted
-- meanwhile is never brought back), and the promoters are told as an
-- enqueue of an earlier due time tells them (the sched marker, the "d"
-- announcement), so that a caller that dies before its own promotion
-- leaves the message to the next promoter at once, not at PromoteWait.
-- Touches only its keys; types are checked before the first write.
local delayed, dstore, sched, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local sharded = ARGV[2] == YES
need(delayed, 'zset')
need(dstore, 'hash')
if sharded then need(sched, 'zset') else need(sched, 'list') end
local rec = redis.call('HGET', dstore, ARGV[1])
if not rec then return 0 end
-- "lane|score|" seq‖envelope: the member is seq‖id.
local _, second = string.find(rec, '^[^|]*|[^|]*|')
if not second or #rec < second + SEQ_LEN then return 0 end
local member = string.sub(rec, second + 1, second + SEQ_LEN) .. ARGV[1]
if not redis.call('ZSCORE', delayed, member) then return 0 end
redis.call('ZADD', delayed, 'XX', now_ms(), member)
tell_promoters(sched, wake, sharded)
return 1
