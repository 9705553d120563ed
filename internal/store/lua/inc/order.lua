-- inc/order.lua: lease tokens and priorities compared.
-- taken_before reports whether the lease token a was taken before b: a
-- token starts with the take's server time (13 hex digits of microseconds)
-- and the message's place in the take (4 hex digits); see take.lua. (Tokens
-- of earlier versions, random there, sort anyhow.)
local function taken_before(a, b)
  local ta, tb = tonumber(string.sub(a, 1, 13), 16) or 0, tonumber(string.sub(b, 1, 13), 16) or 0
  if ta ~= tb then return ta < tb end
  return (tonumber(string.sub(a, 14, 17), 16) or 0) < (tonumber(string.sub(b, 14, 17), 16) or 0)
end

-- prio_of is the priority of a message of lane with score: the lane itself
-- for Levels, the score's opposite for Range.
local function prio_of(lane, score, kind)
  if kind ~= KIND_LEVELS then return -tonumber(score) end
  return tonumber(lane)
end
