-- inc/records.lua: routed records ("lane|score|rest") and dead-letter records.
-- routing_end returns where "lane|score|" ends in s (the second '|', and
-- the first), without checking either field; nil without two '|'.
local function routing_end(s)
  local p1 = string.find(s, '|', 1, true)
  local p2 = p1 and string.find(s, '|', p1 + 1, true)
  return p2, p1
end

-- routed parses "lane|score|rest" (the form of dstore and inflight values and
-- of dead-letter records) and checks the lane is one of nlanes and, for a
-- range, that the score is an integer ZADD takes (digits alone are not
-- enough: 400 of them overflow a double, and ZADD would fail after the
-- script's first write); nil when malformed.
local function routed(rec, nlanes, kind)
  if type(rec) ~= 'string' then return nil end
  local p2, p1 = routing_end(rec)
  if not p2 then return nil end
  local lane = tonumber(string.sub(rec, 1, p1 - 1))
  local score = string.sub(rec, p1 + 1, p2 - 1)
  if not lane or lane ~= math.floor(lane) or lane < 0 or lane >= nlanes then return nil end
  if kind ~= KIND_LEVELS then
    local n = string.match(score, '^-?%d+$') and tonumber(score)
    if not n or n > MAX_SEQ or n < -MAX_SEQ then return nil end
  end
  return lane, score, string.sub(rec, p2 + 1)
end

-- dead_record is a dead-letter record: "lane|score|diedMs|reasonLen|" then
-- the reason and the stored body (dead.go parseDead reads it). A record
-- that no longer says where it was gets UNKNOWN_LANE and an empty score, so
-- that dead.lua never requeues it into a lane it did not come from. (Before
-- this, such records said lane 0, which a Levels queue cannot tell apart.)
local function dead_record(lane, score, now, why, body)
  return lane .. '|' .. score .. '|' .. now .. '|' .. #why .. '|' .. why .. body
end
