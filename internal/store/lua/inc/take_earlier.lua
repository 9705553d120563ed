-- inc/take_earlier.lua: what set_aside (take_aside.lua) asks of a member.
-- include: envelope
--
-- earlier_env is the envelope inside m when m is a segment entry of the
-- earlier form (seq and envelope: what a Range queue of format 2 or 3 keeps
-- in its segments, found in an index when its meta key was lost and made
-- again as format 4), or nil: a known version, a printable id, the attempts.
local function earlier_env(m)
  local v = string.byte(m, SEQ_LEN + 1)
  if v ~= ENV_V1 and v ~= ENV_V2 and v ~= ENV_V3 then return nil end
  local id = env_id(m, SEQ_LEN)
  if not id or string.find(id, '[^!-~]') or not attempts(m, SEQ_LEN) then return nil end
  return string.sub(m, SEQ_LEN + 1)
end

-- named_anywhere reports whether an index of the queue names priority c:
-- then its list is served in that segment's turn, and naming it again
-- ("-0" for 0, in another segment) would serve it out of its turn.
local function named_anywhere(t, c)
  local n = t.nfilled and t.nfilled - 1 or #KEYS - TAKE_FIRST
  for j = 0, n do
    local lane = t.nfilled and t.lanePrefix .. j or KEYS[TAKE_FIRST + j]
    if type(redis.pcall('ZSCORE', lane, c)) == 'string' then return true end
  end
  return false
end
