-- inc/take_lease.lua: the lease of what a take popped.
-- include: envelope, take_state, take_undo, util, wake
--
-- take_lease leases each message popped (t.pops) under its token until
-- t.deadline: a ZADD to the leases, an HSET of its record ("lane|score|"
-- and the member) to inflight, and its pair in the reply (token, member
-- as it was in its lane). The lane index is the number that ends the
-- popped key's name (keys.go: prioq:{Q}:lane:N). Each write fails whole or
-- not at all (a wrong type fails the first chunk; past the pop, Redis no
-- longer refuses writes for memory); a failure undoes the take
-- (take_undo). When work remains (t.more), one more idle consumer is woken
-- (re-arming when nothing is left would only make another consumer run an
-- empty take); the member is a single-member set, so it cannot grow.
local function take_lease(t)
  local _, nowc, us = take_clock(t)
  local stamp, deadline, kind, G, out = string.format('%013x', us), nowc + t.lease, t.kind, t.G, t.out
  local zargs, hargs, i = {}, {}, 0
  t.deadline = deadline
  for _, p in ipairs(t.pops) do
    local lane = string.match(p[1], '(%d+)$')
    if not lane then take_undo(t, {err = 'take: lane key without an index: ' .. p[1]}, false, false) end
    local head = lane .. '|'
    for _, item in ipairs(p[2]) do
      i = i + 1
      local member, rec = item, nil
      if kind == KIND_LEVELS then rec = head .. '|' .. item
      elseif kind == KIND_LISTS then rec = head .. p[4] .. '|' .. item
      else member, rec = item[1], head .. item[2] .. '|' .. item[1] end
      local token = stamp .. string.format('%04x', i) .. t.suffix
      zargs[2 * i - 1], zargs[2 * i] = deadline, token
      hargs[2 * i - 1], hargs[2 * i] = token, rec
      out[2 * i + 2], out[2 * i + 3] = token, member
      -- A message of a group: its token joins the group's leases (last).
      local g = G and string.byte(member, 1) == ENV_V3 and env_group(member)
      if g then
        G.tokens[g] = G.tokens[g] or {}
        G.tokens[g][#G.tokens[g] + 1] = token
      end
    end
  end
  local err = pchunked('ZADD', KEYS[2], zargs)
  if err then take_undo(t, err, false, false) end
  err = pchunked('HSET', KEYS[3], hargs)
  if err then take_undo(t, err, true, false) end
  if t.more then
    local ok = try_arm(KEYS[4], t.top, t.claimed)
    if type(ok) == 'table' and ok.err then take_undo(t, ok, true, true) end
  end
end
