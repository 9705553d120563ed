-- inc/take_glimit.lua: a group's limits, as a take sees them.
-- include: rates, take_state, util
--
-- Groups (groups.go): a popped marker stands for its group's next message
-- (take_group). t.G is the take's group state, made at its first message
-- of a group (a take without groups makes none): per group, messages taken
-- (taken), taken from its lists (ready), parked entries (park), limits read
-- (limit), lease tokens (tokens), times to come back at (due); markers out
-- of the lanes (marks).
local function groups_begin(t)
  t.G = {taken = {}, ready = {}, park = {}, limit = {}, tokens = {}, due = {}, marks = 0}
  return t.G
end

-- group_limit is g's limits (G_LIMITS: group -> "K R P", '' for every
-- group), read once per group and take, false for none: c, its concurrency,
-- and n, its leases; r per per ms, its rate, and m, the takes in its log's
-- window (log). A key of the wrong type among these is passed by: no limit,
-- no count. A group at its limit is parked in G_PARK: of the wrong type, it
-- could not be, and its marker would be lost; no limit is kept then
-- (reported like a broken lane) rather than hide messages.
local function group_limit(t, g)
  local G, prefix = t.G, t.prefix
  local l = G.limit[g]
  if l ~= nil then return l end
  local v = redis.pcall('HMGET', prefix .. G_LIMITS, g, '')
  local c, r, per
  if type(v) == 'table' and not v.err then c, r, per = limit_of(v[1] or v[2]) end
  l = false
  if (c or r) and G.parkOK == nil then
    G.parkOK = key_is(prefix .. G_PARK, 'hash')
    if not G.parkOK then report_broken(t, prefix .. G_PARK) end
  end
  if (c or r) and G.parkOK then
    l = {}
    if c then
      local n = redis.pcall('SCARD', prefix .. G_LEASES .. g)
      l.c, l.n = c, type(n) == 'number' and n or 0
    end
    if r then
      local _, _, us = take_clock(t)
      local log = prefix .. G_LOG .. g
      local m = rate_window(log, us, per)
      if m then l.r, l.per, l.m, l.log = r, per, m, log end
    end
    G.taken[g] = G.taken[g] or 0
  end
  G.limit[g] = l
  return l
end
