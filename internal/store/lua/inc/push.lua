-- inc/push.lua: one entry into a lane.
-- include: lanes
-- push_entry writes one entry into lane key `key` with score: RPUSH or
-- LPUSH (listcmd) into a level's list (named in the filled index, when
-- FILLED) or a priority's list (KIND_LISTS, whose index then names the
-- priority), or ZADD of member (seq‖envelope) into a segment (KIND_RANGE).
-- The keys' types are the caller's to check. push_one is what writers call:
-- it sends a message of a group to its group's list instead.
local function push_entry(key, kind, score, value, listcmd)
  if kind == KIND_LEVELS then
    redis.call(listcmd, key, value)
    name_lane(key)
  elseif kind == KIND_RANGE then
    redis.call('ZADD', key, score, value)
  else
    local prio = prio_str(score)
    redis.call(listcmd, plist_key(key, prio), value)
    redis.call('ZADD', key, score, prio)
    name_lane(key)
  end
end

-- marker_list is the list a lane write of score goes to: the level's lane
-- itself, or the list of the score's priority (KIND_LISTS). A group's
-- marker is in it, and the group's list is named after it.
local function marker_list(lane, kind, score)
  if kind == KIND_LISTS then return plist_key(lane, prio_str(score)) end
  return lane
end
