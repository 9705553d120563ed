-- inc/take_filled.lua: what a take reads of the filled index (MODE_FILLED).
-- include: index, lanes, take_aside, take_list, take_state
--
-- filled_lanes is every lane key of the queue, highest first, built from
-- the index's name (t.lanePrefix) and the lane count (t.nfilled).
local function filled_lanes(t)
  local all = {}
  for j = t.nfilled - 1, 0, -1 do all[#all + 1] = t.lanePrefix .. j end
  return all
end

-- scan_all makes the take pop over every lane, as without the index.
local function scan_all(t)
  t.lanes, t.popN = filled_lanes(t), t.nfilled
  t.filled = nil
end

-- filled_mend names in the index every lane holding messages, and marks it
-- whole (FILLED_WHOLE, score -inf, so first); it reports whether the mark
-- was taken (an index of the wrong type refuses it).
local function filled_mend(t)
  for _, key in ipairs(filled_lanes(t)) do
    if redis.call('EXISTS', key) == 1 then name_lane(key) end
  end
  return type(redis.pcall('ZADD', t.filled, '-inf', FILLED_WHOLE)) == 'number'
end

-- filled_segment pops from segment key, which index member name names
-- (KIND_LISTS): the best priority the segment names (ZRANGE) and that
-- priority's list (take_pop_list, name read). A segment of the wrong type
-- or empty loses its name (reported, when broken); a member that names no
-- priority is set aside (ZREM first: at maxmemory a script's first write
-- must free memory), and one named right but scored wrong is put back under
-- its own score: false, the next name is read. nil: a member could not be
-- set aside, and the take pops without the index, which passes its
-- segment by. Else take_pop_list's reply.
local function filled_segment(t, key, name, want)
  local head = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
  if head.err or not head[1] then
    if head.err then report_broken(t, key) end
    redis.call('ZREM', t.filled, name)
    return false
  end
  local prio, score = head[1], head[2]
  local n = index_prio(prio)
  if not n then
    redis.call('ZREM', key, prio)
    if not set_aside(t, key, prio, score) then return nil end
    return false
  elseif tonumber(score) ~= -n then
    redis.call('ZREM', key, prio)
    redis.call('ZADD', key, -n, prio)
    return false
  end
  return take_pop_list(t, key, plist_key(key, prio), key, prio, score, want, false)
end
