-- inc/take_undo.lua: a take's writes undone, when a lease write fails.
-- include: lanes, util
--
-- take_undo puts the popped messages back at the head of their lane in
-- their order, after removing the leases made so far (leased: in the
-- leases; recorded: in inflight); then it raises err. Newest pop first: a
-- lane popped twice (a group's marker came back to it) gets its entries
-- back in their order. Groups: each message back at the head of its
-- group's list, and the marker a take put back at the tail taken out again
-- (the entries popped, markers and all, go back below).
local function take_undo(t, err, leased, recorded)
  local tokens, out, kind, pops = {}, t.out, t.kind, t.pops
  for i = 4, #out, 2 do tokens[#tokens + 1] = out[i] end
  if recorded then chunked('HDEL', KEYS[3], tokens) end
  if leased then chunked('ZREM', KEYS[2], tokens) end
  for i = #pops, 1, -1 do
    local p = pops[i]
    for j = #(p.groups or {}), 1, -1 do
      local r = p.groups[j]
      redis.call('LPUSH', r[1], r[2])
      if r[4] then redis.call('LREM', r[3], -1, r[5]) end
    end
    local key, items = p[1], p.orig or p[2]
    if kind ~= KIND_RANGE then
      local rev = {}
      for j = #items, 1, -1 do rev[#rev + 1] = items[j] end
      if kind == KIND_LISTS then
        chunked('LPUSH', p[3], rev)
        redis.call('ZADD', key, p[4], prio_str(p[4]))
      else
        chunked('LPUSH', key, rev)
      end
      name_lane(key)
    else
      local pairs_ = {}
      for _, it in ipairs(items) do
        pairs_[#pairs_ + 1] = it[2]
        pairs_[#pairs_ + 1] = it[1]
      end
      chunked('ZADD', key, pairs_)
    end
  end
  error(err)
end
