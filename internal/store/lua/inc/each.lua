-- inc/each.lua: walking a lane's messages in serving order.
-- include: index, lanes
-- each_in calls fn(entry, key) for the entries of list or sorted set key in
-- order, a CHUNK at a time, until fn returns true; it reports whether fn
-- stopped it.
local function each_in(key, cmd, fn)
  for start = 0, math.huge, CHUNK do
    local items = redis.call(cmd, key, start, start + CHUNK - 1)
    for _, e in ipairs(items) do
      if fn(e, key) then return true end
    end
    if #items < CHUNK then return false end
  end
end

-- marker_group is the group whose marker e is (G_MARK and a valid group
-- key, groups.go validateGroup), or nil: an entry that only starts like a
-- marker (garbage written by hand) is passed on as an entry, and buried
-- as one that does not decode.
local function marker_group(e)
  if string.sub(e, 1, 1) ~= G_MARK or #e > 129 then return nil end
  return string.match(e, '^.([!-~]+)$')
end

-- lane_each calls fn(entry, key, group, list) for each message of a lane in
-- serving order until fn returns true, key being the key that holds the
-- entry (the lane, or for KIND_LISTS the priority's list, or a group's list:
-- then group is the group and list the list its marker is in), and reports
-- whether fn stopped it. A priority list of the wrong type is passed
-- by, and so is an index member that names no priority (index_prio), alone.
-- Messages of a group parked at its limit are not in the lane (see
-- group_parked).
local function lane_each(lane, kind, fn)
  if kind == KIND_RANGE then return each_in(lane, 'ZRANGE', fn) end
  -- A group's marker stands for its group's list (group_push), whose
  -- messages are the group's at that place: key is then the group's list.
  local function entry(e, key)
    local g = marker_group(e)
    if g then
      local glist = key .. G_LIST .. g
      return redis.call('TYPE', glist).ok == 'list' and each_in(glist, 'LRANGE', function(m, gl)
        return fn(m, gl, g, key)
      end)
    end
    return fn(e, key)
  end
  if kind == KIND_LEVELS then return each_in(lane, 'LRANGE', entry) end
  return each_in(lane, 'ZRANGE', function(prio)
    if not index_prio(prio) then return false end
    local key = plist_key(lane, prio)
    return redis.call('TYPE', key).ok == 'list' and each_in(key, 'LRANGE', entry)
  end)
end
