-- inc/sweepgroups.lua: the sweep's mending of parked groups (sweep.lua).
-- include: lanes, park, rates, wake
-- Groups parked at their limit whose leases are no longer all alive: an ack
-- cut between its ZREM and the SREM of its token (a process killed in its
-- pipeline), a record lost, or a put-back of markers that never ran after
-- the last lease ended. Their dead tokens go, and a group below its limit
-- gets its markers back: nothing waits on a lease that no longer exists.
-- O(parked groups x their limits); one HKEYS when none is parked. lane0 is
-- lane 0's key (the group keys are built from it), leases the leases' key,
-- wake the wake-up key.
local function mend_parked(lane0, leases_key, wake, kind, now)
  local park = queue_key(lane0, G_PARK)
  local parked = redis.pcall('HKEYS', park)
  if type(parked) == 'table' and not parked.err and #parked > 0 then
    local limits, gdue = queue_key(lane0, G_LIMITS), queue_key(lane0, G_DUE)
    local mended = false
    for _, g in ipairs(parked) do
      local leases = queue_key(lane0, G_LEASES .. g)
      local toks = redis.pcall('SMEMBERS', leases)
      local n = 0
      if type(toks) == 'table' and not toks.err then
        for _, tok in ipairs(toks) do
          if redis.call('ZSCORE', leases_key, tok) then n = n + 1 else redis.pcall('SREM', leases, tok) end
        end
      end
      local l = redis.pcall('HMGET', limits, g, '')
      local lim = type(l) == 'table' and not l.err and limit_of(l[1] or l[2])
      -- A group parked at its rate limit comes back at its due time, from a
      -- promoter (gdue); one whose time has passed (no promoter ran: every
      -- consumer has NoPromoter, or its wake-up was lost) or that has none
      -- (lost with a gdue of the wrong type) comes back here, and its next
      -- take parks it again if need be.
      local timed = redis.pcall('ZSCORE', gdue, g)
      -- (A time that is no number, "inf" written by hand, counts as passed.)
      if type(timed) == 'string' and not (tonumber(timed) and tonumber(timed) > now) then
        redis.call('ZREM', gdue, g)
        timed = nil
      end
      if type(timed) ~= 'string' and (not lim or n < lim) and group_unpark(lane0, kind, g) then mended = true end
    end
    if mended then try_arm(wake, nil) end
  end
end
