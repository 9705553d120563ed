-- inc/take_remains.lua: whether work is left after a pop, and the best
-- priority left.
-- include: index
--
-- scan_top sets t.top to the best priority in list[k..] (the first lane
-- holding something, and for a segment its lowest score; nil when none)
-- and reports whether there is one: a lane per command, so it costs more
-- where lanes are sparse. Only with MODE_TOP.
local function scan_top(t, list, k)
  local kind, top = t.kind, nil
  for j = k, #list do
    if kind == KIND_LEVELS then
      if redis.call('EXISTS', list[j]) == 1 then top = tonumber(string.match(list[j], '(%d+)$')) end
    elseif kind == KIND_LISTS then
      top = index_head(list[j]) -- (members that name no priority passed over)
    else
      local head = redis.call('ZRANGE', list[j], 0, 0, 'WITHSCORES')
      if head[2] then top = -tonumber(head[2]) end
    end
    if top then break end
  end
  t.top = top
  return top ~= nil
end

-- remains reports whether work is left after a pop from key that took
-- fewer than asked (emptied) or all it asked: the lanes ahead of key are
-- empty (the pop took the first non-empty key), so only key and the lanes
-- after it can hold work, and one EXISTS over them asks it. With many lanes
-- after key, the popped lane is asked alone first: under load it still has
-- work, and that costs the same with 2 lanes or 64. KIND_LISTS: the index
-- keeps the names of the priorities left, so key itself is asked, unless
-- the popped list said it holds more (listMore). The filled index: a
-- level's name was dropped when the pop emptied it; one that gave all
-- asked, or a segment, is asked, and dropped when empty; then the index
-- says (beyond FILLED_WHOLE). With MODE_TOP, it finds the best priority
-- left instead (scan_top).
local function remains(t, key, emptied, listMore)
  local kind, filled = t.kind, t.filled
  if filled then
    if listMore then return true end
    if not emptied or kind == KIND_LISTS then
      if redis.call('EXISTS', key) == 1 then return true end
      redis.call('ZREM', filled, string.match(key, '(%d+)$'))
    end
    return redis.call('ZCARD', filled) > t.whole
  end
  local list, k = KEYS, TAKE_FIRST
  if t.lanes then list, k = t.lanes, 1 end
  while list[k] ~= key do k = k + 1 end
  if kind == KIND_LISTS then
    if t.wantTop then return scan_top(t, list, k) end
    return listMore or redis.call('EXISTS', unpack(list, k)) > 0
  end
  if emptied then k = k + 1 end
  if k > #list then return false end
  if t.wantTop then return scan_top(t, list, k) end
  if not emptied and #list - k >= MANY_LANES then
    if redis.call('EXISTS', key) == 1 then return true end
    k = k + 1
  end
  return redis.call('EXISTS', unpack(list, k)) > 0
end
