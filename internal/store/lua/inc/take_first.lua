-- inc/take_first.lua: a take's first pop, and its replies when it popped
-- no message.
-- include: lanes, take_pop, take_popall, take_remains, take_state, wake
--
-- take_first pops up to t.count. A lane key of the wrong type fails the
-- multi-key pop before it pops anything (it checks each key it reaches), so
-- nothing was written: the take leaves out the lanes of the wrong type
-- (reported) and pops again (a paused key of the wrong type still fails
-- it, writing nothing). Any other error is raised.
local function take_first(t)
  local res = take_pop(t, redis.pcall, true, t.count)
  if type(res) ~= 'table' or not res.err then return res end
  if not string.find(res.err, 'WRONGTYPE', 1, true) then error(res) end
  local want = lane_type(t.kind)
  local left = take_lanes(t, function(key)
    local ty = redis.call('TYPE', key).ok
    return ty == 'none' or ty == want
  end)
  if left then return take_pop(t, redis.call, true, t.count) end
  return nil
end

-- take_nothing is the reply when nothing was popped: with MODE_TOP, what
-- lies below the lanes popped from. Work left below the floor keeps the
-- wake-up set, as a take that put back what it popped leaves it.
local function take_nothing(t)
  if t.wantTop then scan_top(t, t.lanes or KEYS, t.lanes and 1 or TAKE_FIRST) end
  if t.belowFloor then
    if not t.top or t.belowFloor > t.top then t.top = t.belowFloor end
    try_arm(KEYS[4], t.top, t.claimed)
  end
  return take_reply(t)
end

-- take_paused is the reply when the pop took the paused key's sentinel
-- (or pop_filled saw it): it goes back.
local function take_paused(t)
  if not t.pausedSeen then
    if t.kind == KIND_LEVELS then redis.call('RPUSH', KEYS[1], PAUSE) else redis.call('ZADD', KEYS[1], 0, PAUSE) end
  end
  return take_reply(t, REPLY_PAUSED)
end
