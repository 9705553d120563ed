-- inc/purgegroups.lua: the group lists a purge deletes (purge.lua).
-- include: each, lanes, parkentry, push
-- The groups' lists: beside each lane's list (or priority's) that holds
-- their markers, and where parked markers say. Each list is asked in the
-- cheaper of two ways, so that the whole costs O(entries), not O(lists x
-- groups) (a Range queue of one message per group, each at a priority of
-- its own, had 3,000 x 3,000 names built, past lua-time-limit): a list
-- shorter than the number of groups is read for its markers; a longer one
-- gets a name per group (most of them missing: DEL passes them by).
-- beside: the lists the markers are in (the lanes, or the priorities'
-- lists); lane0: lane 0's key. Returns the group lists and how many ready
-- messages the groups hold beyond their markers.
local function purge_group_lists(gready, gpark, lane0, beside, kind)
  local glists, groups, delta = {}, {}, 0
  local counts = redis.call('HGETALL', gready)
  for i = 1, #counts, 2 do
    local c = tonumber(counts[i + 1]) or 0
    if counts[i] == '' then delta = delta - c else delta = delta + c; groups[#groups + 1] = counts[i] end
  end
  if #groups > 0 then
    for _, l in ipairs(beside) do
      local len = redis.call('TYPE', l).ok == 'list' and redis.call('LLEN', l) or 0
      if len > 0 and len <= #groups then
        each_in(l, 'LRANGE', function(e)
          local g = marker_group(e)
          if g then glists[#glists + 1] = l .. G_LIST .. g end
        end)
      elseif len > 0 then
        for _, g in ipairs(groups) do glists[#glists + 1] = l .. G_LIST .. g end
      end
    end
  end
  local parked = redis.call('HGETALL', gpark)
  for i = 1, #parked, 2 do
    for entry in string.gmatch(parked[i + 1], '[^ ]+') do
      -- (An entry that does not parse names no list: the park goes whole.)
      local ln, score = park_entry(entry, kind)
      if ln then
        local lane = queue_key(lane0, 'lane:' .. ln)
        glists[#glists + 1] = marker_list(lane, kind, score) .. G_LIST .. parked[i]
      end
    end
  end
  return glists, delta
end
