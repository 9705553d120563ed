-- inc/schedule.lua: a message into the delayed set, the promoters told.
-- include: delayed, envelope, wake
-- schedule stores a delayed message (its member in the delayed set, its
-- record "lane|score|" seq‖envelope in dstore) and wakes a promoter when it
-- comes due before the set's head did: the promoters sleep until the head's
-- due time. The sched marker is a list of length ≤ 1, so it stays bounded;
-- for a shard of a queue of several (sharded) it is a sorted set whose one
-- member is DUE, which a consumer's one blocking wait per shard watches
-- beside the wake-up set when that consumer promotes.
-- earliest is the head's due time as last seen (nil: read it here); schedule
-- returns it as it is now, for the next message of a batch.
local function schedule(delayed, dstore, sched, due, seq, id, lane, score, env, earliest, sharded)
  if earliest == nil then
    local head = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    earliest = head[2] and tonumber(head[2]) or math.huge
  end
  redis.call('ZADD', delayed, due, delayed_member(seq, id))
  redis.call('HSET', dstore, id, lane .. '|' .. score .. '|' .. seqbytes(seq) .. env)
  if due < earliest then
    earliest = due
    -- The wake-up key is the sched key's sibling (keys.go): same prefix.
    tell_promoters(sched, string.sub(sched, 1, #sched - #'sched') .. 'wake', sharded)
  end
  return earliest
end
