-- inc/parkentry.lua: the entries of a group's parked markers, read.
-- NLANES: how many lanes the queue has; every script that may put a group's
-- parked markers back sets it (park_entry checks the lanes entries name).
-- BURIED counts the parked entries such a script set aside (group_unpark).
local NLANES, BURIED = nil, 0

-- park_entry reads an entry of a group's parked markers (G_PARK, written
-- by take.lua: "N|score"): the lane N, one of the queue's NLANES, and for
-- KIND_LISTS the score of the priority whose list the marker came from (an
-- integer within 2^53, as routed checks; Levels: none, nil). nil for an
-- entry that says anything else (a hand edit, a bug): pushing its marker
-- would put it where no take looks, or fail the script past its writes.
local function park_entry(entry, kind)
  local n, score = string.match(entry, '^(%d+)|(.*)$')
  n = tonumber(n or '')
  if not n or not NLANES or n >= NLANES then return nil end
  if kind ~= KIND_LISTS then
    if score ~= '' then return nil end
    return n, nil
  end
  local v = string.match(score, '^-?%d+$') and tonumber(score)
  if not v or v > MAX_SEQ or v < -MAX_SEQ then return nil end
  return n, score
end
