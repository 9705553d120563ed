-- inc/take_popfilled.lua: a take's pop through the filled index.
-- include: lanes, take_filled, take_list, take_lists, take_pop, take_state
--
-- base_pop is the pop without the filled index.
local function base_pop(t, call, paused, want)
  if t.kind == KIND_LISTS then return pop_lists(t, call, paused, want) end
  return take_mpop(t, call, paused, want)
end

-- pop_filled (MODE_FILLED) reads the best lane the filled index names
-- (ZRANGE) and pops from that lane alone: a level's list (take_pop_list) or
-- a segment (filled_segment); a name whose lane is empty (takes without
-- the index leave them, as do cancels) is dropped and the next one read.
-- The paused key is asked first (TYPE: a key of the wrong type fails the
-- take, as the multi-key pop would). An index of the wrong type is passed
-- by (reported): the take pops over every lane, as without one (scan_all).
-- An index is known to be whole by its member FILLED_WHOLE, which only
-- filled_mend writes: an index without it (deleted by hand, mended after
-- it was of the wrong type, made again by a push naming its own lane
-- alone) is mended first, or lanes no name points at would wait.
local function pop_filled(t, call, paused, want)
  local filled, kind = t.filled, t.kind
  if paused then
    local ty, wantType = redis.call('TYPE', KEYS[1]).ok, lane_type(kind)
    if ty == wantType then
      t.pausedSeen = true
      return {KEYS[1]}
    end
    if ty ~= 'none' then error({err = 'WRONGTYPE prioq: ' .. KEYS[1] .. ' is a ' .. ty .. ', want a ' .. wantType}) end
  end
  while true do
    local head = redis.pcall('ZRANGE', filled, 0, 1)
    if head.err then report_broken(t, filled) end
    t.whole = not head.err and head[1] == FILLED_WHOLE and 1 or 0
    if head.err or (t.whole == 0 and not filled_mend(t)) then
      scan_all(t)
      return base_pop(t, call, false, want)
    end
    local name = head[2]
    local n = tonumber(name or '')
    if t.whole == 0 then
      -- just mended: read it again
    elseif not name then
      return nil
    elseif not (n and n == math.floor(n) and n >= 0 and n < t.nfilled) then
      report_broken(t, filled) -- names no lane (a hand edit): dropped
      redis.call('ZREM', filled, name)
    else
      local key, p = t.lanePrefix .. name, nil
      if kind == KIND_LISTS then p = filled_segment(t, key, name, want) else
        p = take_pop_list(t, key, key, filled, name, nil, want, false) end
      if p == nil then
        scan_all(t)
        return pop_lists(t, call, false, want)
      end
      if p then return p end
    end
  end
end
