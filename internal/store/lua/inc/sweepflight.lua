-- inc/sweepflight.lua: the sweep's refresh of the groups in flight (sweep.lua).
-- include: lanes
-- The groups that may have messages in flight (G_FLIGHT, Queue.Groups):
-- one whose time passed is dropped when none of its leases is left, or gets
-- its latest lease's deadline (an Extend moved it past the take's). One
-- ZRANGEBYSCORE when no time passed. The drop frees memory; the new time
-- replaces the old (pcall: refused at maxmemory when it is this sweep's
-- first write, it is asked again at the next). A key of the wrong type only
-- misleads Groups: passed by.
local function refresh_flight(lane0, leases_key, now, limit)
  local gflight = queue_key(lane0, G_FLIGHT)
  local flying = redis.pcall('ZRANGEBYSCORE', gflight, '-inf', now, 'LIMIT', 0, limit)
  if type(flying) == 'table' and not flying.err then
    for _, g in ipairs(flying) do
      local toks = redis.pcall('SMEMBERS', queue_key(lane0, G_LEASES .. g))
      local last = nil
      if type(toks) == 'table' and not toks.err then
        for i = 1, #toks, CHUNK do
          local d = redis.call('ZMSCORE', leases_key, unpack(toks, i, math.min(i + CHUNK - 1, #toks)))
          for _, v in ipairs(d) do
            if v and (not last or tonumber(v) > last) then last = tonumber(v) end
          end
        end
      end
      if last then
        redis.pcall('ZADD', gflight, 'XX', string.format('%d', last), g)
      else
        redis.call('ZREM', gflight, g)
      end
    end
  end
end
