-- inc/grouppush.lua: a message into its group's list, or into its lane.
-- include: envelope, lanes, push, util
-- group_push writes envelope value of group g (groups.go): to the tail or
-- the head (listcmd) of the group's list beside marker_list, counted in the
-- ready counts; when that list was empty, the group's marker goes into the
-- lane as a message would (push_entry): one marker per group and list,
-- which takes serve in turn with the lane's other entries. A group's list
-- of the wrong type (a hand edit) is passed by: the message goes into the
-- lane itself, served in its turn without the group's rotation, so that it
-- is never lost. Reports whether a marker (or the message) went into the lane.
--
-- At the head (LPUSH: a message whose lease expired or was given back, see
-- sweep.lua and release.lua) the group's marker goes to the head of its
-- list too, from wherever it is in it, so that the message is served
-- before the newer ones of its priority, as messages without a group are,
-- not at its group's next turn behind them. A take put the marker at the
-- tail, so LREM looks from there. (A parked marker is put back by the lease
-- end before this, which then moves it.)
local function group_push(lane, kind, score, value, listcmd, g)
  local n = redis.pcall(listcmd, marker_list(lane, kind, score) .. G_LIST .. g, value)
  if type(n) ~= 'number' then
    push_entry(lane, kind, score, value, listcmd)
    return true
  end
  local ready = queue_key(lane, G_READY)
  count_add(ready, g, 1)
  if n == 1 then
    push_entry(lane, kind, score, G_MARK .. g, listcmd)
    count_add(ready, '', 1) -- markers in lanes (Stats)
    return true
  end
  if listcmd == 'LPUSH' then
    local list, mark = marker_list(lane, kind, score), G_MARK .. g
    if redis.call('LINDEX', list, 0) ~= mark and redis.call('LREM', list, -1, mark) > 0 then
      redis.call('LPUSH', list, mark)
    end
  end
  return false
end

-- push_one writes one message into lane key `key` with score (push_entry),
-- or, when it belongs to a group, into its group's list (group_push).
local function push_one(key, kind, score, value, listcmd)
  local g = kind ~= KIND_RANGE and env_group(value)
  if g then
    group_push(key, kind, score, value, listcmd, g)
  else
    push_entry(key, kind, score, value, listcmd)
  end
end
