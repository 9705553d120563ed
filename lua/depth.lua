-- depth.lua: how many messages wait in each segment of a Range queue of
-- format 4, and each segment's first message (for Stats). Reads only.
--
-- (keys.go describes every key.)
-- KEYS[1..] lane keys (segment indexes), lane 0 first
-- ARGV[1]   the most priorities to count per segment: beyond, the count
--           is the mean length of those counted times the names in the index
-- Returns: per lane, {count, first envelope or ''}, and a third element
--          YES when the count is an estimate.
local most = tonumber(ARGV[1])
local out = {}
for _, lane in ipairs(KEYS) do
  local n, head, seen, estimated = 0, '', 0, NO
  if redis.call('TYPE', lane).ok == 'zset' then
    local names = redis.call('ZRANGE', lane, 0, most - 1)
    for _, prio in ipairs(names) do
      local key = plist_key(lane, prio)
      if redis.call('TYPE', key).ok == 'list' then
        local len = redis.call('LLEN', key)
        if head == '' and len > 0 then head = redis.call('LINDEX', key, 0) end
        n = n + len
      end
      seen = seen + 1
    end
    local all = redis.call('ZCARD', lane)
    if all > seen and seen > 0 then
      n = math.floor(n * all / seen)
      estimated = YES
    end
  end
  out[#out + 1] = {n, head, estimated}
end
return out
