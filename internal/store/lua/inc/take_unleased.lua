-- inc/take_unleased.lua: a take's reply without a lease (AtMostOnce).
-- include: take_state, wake
--
-- take_unleased is the reply without a lease (AtMostOnce): the messages
-- left their lanes with the pop; it wakes another consumer while work
-- remains, and pairs each message with its lane.
local function take_unleased(t)
  local out, kind = t.out, t.kind
  for _, p in ipairs(t.pops) do
    local lane = string.match(p[1], '(%d+)$')
    for _, item in ipairs(p[2]) do
      out[#out + 1] = lane
      if kind == KIND_RANGE then out[#out + 1] = item[1] else out[#out + 1] = item end
    end
  end
  if t.more then try_arm(KEYS[4], t.top, t.claimed) end
  return take_reply(t)
end
