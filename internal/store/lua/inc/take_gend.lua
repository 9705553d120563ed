-- inc/take_gend.lua: the group counts and parks a take writes, last.
-- include: groupdue, rates, util
--
-- take_groups_end writes what take_group and take_lease gathered of groups
-- (t.G), after the leases: every write is a pcall, nothing can fail after.
-- Each group's tokens join its leases and its rate log, and it may have
-- messages in flight until the take's deadline (Queue.Groups); a group
-- parked at its rate gets its time to come back (group_due); one parked at
-- its concurrency alone has none: one left in gdue (a cancel emptied its
-- list meanwhile) would keep lease ends from putting it back (rate_parked).
local function take_groups_end(t)
  local G, prefix = t.G, t.prefix
  if not G then return end
  for g, tokens in pairs(G.tokens) do
    pchunked('SADD', prefix .. G_LEASES .. g, tokens)
    redis.pcall('ZADD', prefix .. G_FLIGHT, 'GT', t.deadline, g)
    local lim = G.limit[g]
    if lim and lim.r then rate_log(lim.log, t.us, lim.per, tokens) end
  end
  for g, due in pairs(G.due) do group_due(prefix, g, due, t.sharded) end
  for g in pairs(G.park) do
    if not G.due[g] then redis.pcall('ZREM', prefix .. G_DUE, g) end
  end
  for g, n in pairs(G.ready) do count_add(prefix .. G_READY, g, -n) end
  if G.marks > 0 then count_add(prefix .. G_READY, '', -G.marks) end
  for g, entries in pairs(G.park) do
    local key = prefix .. G_PARK
    local was = redis.pcall('HGET', key, g)
    if type(was) == 'string' then entries = was .. ' ' .. entries end
    redis.pcall('HSET', key, g, entries)
  end
end
