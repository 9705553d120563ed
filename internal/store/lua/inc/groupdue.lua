-- inc/groupdue.lua: the time a group parked at its rate comes back.
-- include: wake
-- group_due sets the time (ms) group g, parked at its rate limit, comes back
-- (the queue's gdue, prefix its keys' prefix): a promoter puts its markers
-- back then (promote.lua). When that is before every due time the promoters
-- sleep for (the delayed set's head, gdue's), it wakes them as schedule
-- does. pcall: past the take's writes; a group left without a time (gdue of
-- the wrong type) is put back by the sweep's repair.
local function group_due(prefix, g, due, sharded)
  local gdue, earliest = prefix .. G_DUE, math.huge
  for _, key in ipairs({prefix .. 'delayed', gdue}) do
    local head = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
    if type(head) == 'table' and head[2] then earliest = math.min(earliest, tonumber(head[2])) end
  end
  if type(redis.pcall('ZADD', gdue, due, g)) ~= 'number' or due >= earliest then return end
  local sched = prefix .. 'sched'
  if sharded then
    redis.pcall('ZADD', sched, 0, DUE)
  elseif redis.pcall('LLEN', sched) == 0 then
    redis.pcall('RPUSH', sched, SCHED)
  end
  announce(prefix .. 'wake', ANNOUNCE_DUE)
end
