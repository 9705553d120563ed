-- inc/delayed.lua: the delayed set and its records.
-- include: envelope, records, util, wake
-- delayed_member is the delayed set's member for a message: its sequence
-- number in front of its id, so that messages due in the same millisecond are
-- promoted in the order they were scheduled, whatever their ids.
local function delayed_member(seq, id) return seqbytes(seq) .. id end
local function delayed_id(member) return string.sub(member, SEQ_LEN + 1) end

-- unschedule removes the delayed set's member of id, whose dstore record is
-- rec, and returns how many members it removed. The member is read from the
-- record (its sequence number follows "lane|score|"); when the record is too
-- damaged to say (or says wrong), the set is searched, O(delayed), so that no
-- member outlives its record: a member left behind would promote the next
-- message stored under the same id at the old due time.
local function unschedule(delayed, rec, id)
  local p2 = routing_end(rec)
  if p2 and #rec >= p2 + SEQ_LEN then
    local n = redis.call('ZREM', delayed, string.sub(rec, p2 + 1, p2 + SEQ_LEN) .. id)
    if n > 0 then return n end
  end
  local gone = {}
  for start = 0, math.huge, CHUNK do
    local members = redis.call('ZRANGE', delayed, start, start + CHUNK - 1)
    for _, m in ipairs(members) do
      if delayed_id(m) == id then gone[#gone + 1] = m end
    end
    if #members < CHUNK then break end
  end
  chunked('ZREM', delayed, gone)
  return #gone
end

-- need_delayed checks the keys schedule writes: the delayed set, the store
-- of delayed records, the sched marker (a list; for a shard of a queue of
-- several, sharded, a sorted set).
local function need_delayed(delayed, dstore, sched, sharded)
  need(delayed, 'zset')
  need(dstore, 'hash')
  if sharded then need(sched, 'zset') else need(sched, 'list') end
end

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
    if sharded then
      redis.call('ZADD', sched, 0, DUE)
    elseif redis.call('LLEN', sched) == 0 then
      redis.call('RPUSH', sched, SCHED)
    end
    -- The wake-up key is the sched key's sibling (keys.go): same prefix.
    announce(string.sub(sched, 1, #sched - #'sched') .. 'wake', ANNOUNCE_DUE)
  end
  return earliest
end
