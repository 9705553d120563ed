-- depth.lua: how many messages wait in each segment of a Range queue of
-- format 4, and each segment's first message (for Stats). Reads only.
--
-- include: index, lanes
--
-- (keys.go describes every key.)
-- KEYS[1..] lane keys (segment indexes), lane 0 first
-- ARGV[1]   the most priorities' lists to count, in all: a segment with
--           more names than the budget leaves is estimated, its names times
--           the mean length of the lists counted (its own, or else all so
--           far; 1 before any), so that Stats stays a few thousand calls
--           whatever the queue holds
-- Returns: per lane, {count, first envelope or '', YES when estimated, the
-- priority whose list holds that first entry or ''}. The first entry may be
-- a group's marker: Stats then reads that group's list beside it.
local left = tonumber(ARGV[1])
local out = {}
local all_n, all_lists = 0, 0
for _, lane in ipairs(KEYS) do
  local n, head, seen, estimated, headPrio = 0, '', 0, NO, ''
  if redis.call('TYPE', lane).ok == 'zset' then
    local names = {}
    if left > 0 then names = redis.call('ZRANGE', lane, 0, left - 1) end
    for _, prio in ipairs(names) do
      local key = plist_key(lane, prio)
      -- A wrong type counts 0, and so does a member that names no priority
      -- (inc/index.lua index_prio): takes set it aside.
      local len = 0
      if index_prio(prio) then len = redis.pcall('LLEN', key) end
      if type(len) ~= 'number' then len = 0 end
      if head == '' and len > 0 then head, headPrio = redis.call('LINDEX', key, 0), prio end
      n = n + len
      seen = seen + 1
    end
    left = left - seen
    all_n, all_lists = all_n + n, all_lists + seen
    local total = redis.call('ZCARD', lane)
    if total > seen then
      local mean = 1
      if seen > 0 then mean = n / seen elseif all_lists > 0 then mean = all_n / all_lists end
      n = math.floor(n + (total - seen) * mean + 0.5)
      estimated = YES
    end
  end
  out[#out + 1] = {n, head, estimated, headPrio}
end
return out
