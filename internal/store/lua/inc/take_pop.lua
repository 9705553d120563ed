-- inc/take_pop.lua: the multi-key pop over a take's lanes, and the lanes
-- it passes by.
-- include: take_state
--
-- take_mpop pops up to want entries from the first lane holding any (LMPOP
-- from a level's list; ZMPOP from a segment, or from a segment's index for
-- KIND_LISTS) with call (redis.call or redis.pcall). The paused key goes
-- first (paused): while paused it is the first non-empty key, so the pop
-- returns its sentinel (put back by take_paused) and no lane is touched.
-- Unpaused it costs nothing: no extra command per take. The arguments are
-- built with unpack (one C call), not a loop: with 64 lanes the loop was a
-- measurable part of a take.
local function take_mpop(t, call, paused, want)
  local args, lanes, popN, popLast = nil, t.lanes, t.popN, t.popLast
  if lanes then
    args = {popN, unpack(lanes, 1, popN)}
    if paused then
      table.insert(args, 2, KEYS[1])
      args[1] = popN + 1
    end
  elseif paused then
    args = {popLast - TAKE_FIRST + 2, KEYS[1], unpack(KEYS, TAKE_FIRST, popLast)}
  else
    args = {popLast - TAKE_FIRST + 1, unpack(KEYS, TAKE_FIRST, popLast)}
  end
  local m = #args
  args[m + 2] = 'COUNT'
  args[m + 3] = want
  if t.kind == KIND_LEVELS then
    args[m + 1] = 'LEFT'
    return call('LMPOP', unpack(args))
  end
  args[m + 1] = 'MIN'
  return call('ZMPOP', unpack(args))
end

-- take_lanes sets t.lanes to the lanes of KEYS, keep(key) those kept (the
-- others reported as broken), the first t.popN of them those a pop may take
-- from: of the lanes so far, those within t.popLast.
local function take_lanes(t, keep)
  local cands, limit = t.lanes, t.popN
  if not cands then
    cands, limit = {}, t.popLast - TAKE_FIRST + 1
    for k = TAKE_FIRST, #KEYS do cands[#cands + 1] = KEYS[k] end
  end
  t.lanes, t.popN = {}, 0
  for j, key in ipairs(cands) do
    if keep(key) then
      t.lanes[#t.lanes + 1] = key
      if j <= limit then t.popN = t.popN + 1 end
    else
      report_broken(t, key)
    end
  end
  return t.popN > 0
end

-- pass_by leaves index key out of the take's lanes, as broken: it holds a
-- member that names no priority which could not be set aside (set_aside),
-- and goes back untouched.
local function pass_by(t, key)
  take_lanes(t, function(k) return k ~= key end)
end
