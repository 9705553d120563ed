-- inc/delayed.lua: the delayed set and its records.
-- include: envelope, records, util
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
