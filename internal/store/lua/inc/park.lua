-- inc/park.lua: a group's parked markers back into their lanes.
-- include: lanes, parkentry, push, records, util
-- group_unpark puts back the markers of group g parked at its limit
-- (groups.go): each into the lane it came from, at the tail, so that the
-- group waits its turn again. An entry whose lane refuses the push (a key
-- of the wrong type) stays parked. An entry that does not parse
-- (park_entry) is set aside in the dead letters, whole, with the reason
-- (and counted in BURIED, and in the server's log), so that the others go
-- on; with a dead list of the wrong type it stays where it is, unused.
-- Everything is read first, and the first write removes the group's
-- entries (HDEL, freeing memory): at maxmemory Redis refuses only a
-- script's first write that may grow memory, so a full Redis still puts
-- markers back (they replace the entries). Reports whether any went back.
local function group_unpark(lane, kind, g)
  local park = queue_key(lane, G_PARK)
  local parked = redis.pcall('HGET', park, g)
  if type(parked) ~= 'string' then return false end
  local push, kept, bad = {}, {}, {}
  for entry in string.gmatch(parked, '[^ ]+') do
    local n, score = park_entry(entry, kind)
    local key = n and queue_key(lane, 'lane:' .. n)
    if not n then
      bad[#bad + 1] = entry
    elseif key_is(key, lane_type(kind)) and (kind ~= KIND_LISTS or key_is(plist_key(key, prio_str(score)), 'list')) then
      -- (push_entry writes a priority's list before its index: both
      -- checked, it cannot fail half-way.)
      push[#push + 1] = {key, score}
    else
      kept[#kept + 1] = entry
    end
  end
  local dead = queue_key(lane, DEAD_KEY)
  if #bad > 0 and not key_is(dead, 'list') then
    for _, e in ipairs(bad) do kept[#kept + 1] = e end
    bad = {}
  end
  redis.call('HDEL', park, g)
  for _, p in ipairs(push) do push_entry(p[1], kind, p[2], G_MARK .. g, 'RPUSH') end
  if #kept > 0 then redis.call('HSET', park, g, table.concat(kept, ' ')) end
  if #bad > 0 then
    local now, why = now_ms(), 'corrupt parked entry of group ' .. g
    for _, e in ipairs(bad) do redis.call('RPUSH', dead, dead_record(UNKNOWN_LANE, '', now, why, e)) end
    BURIED = BURIED + #bad
    redis.log(redis.LOG_WARNING, 'prioq: ' .. why .. ' in ' .. park .. ' moved to the dead letters: ' .. table.concat(bad, ' '))
  end
  if #push > 0 then count_add(queue_key(lane, G_READY), '', #push) end
  return #push > 0
end
