-- inc/take_state.lua: a take's state, one table (t), and its one reply.
-- include: lanes, util
--
-- take_state reads take.lua's KEYS and ARGV (its header says each) into the
-- table every step of a take reads and writes. Checked before the pop: past
-- it, a nil here would lose what was popped. t.lanes is nil while the take
-- pops from and looks at every lane in KEYS (the normal case: no table
-- built), else the lanes left (see pass_by), of which the first t.popN may
-- be popped from.
local function take_state()
  local t = {lease = tonumber(ARGV[1]), count = tonumber(ARGV[2]), kind = kind_of(ARGV[3]),
    suffix = ARGV[4], floor = tonumber(ARGV[7] or ''), hint = tonumber(ARGV[8] or ''),
    prefix = string.match(KEYS[2], '^(.*)leases$'), popLast = #KEYS,
    broken = {}, brokenSeen = {}, pops = {}, out = {'', '', ''}, whole = 0}
  for w in string.gmatch(ARGV[5] or '', '[^ ]+') do
    if w == MODE_TOP then t.wantTop = true
    elseif w == MODE_CLAIM then t.claimed = true
    elseif w == MODE_SHARDED then t.sharded = true
    elseif w == MODE_FILLED then t.nfilled = tonumber(ARGV[9] or '') or error('take: bad lane count')
    else error('take: unknown mode ' .. w) end
  end
  local popLanes = tonumber(ARGV[6] or 0)
  assert(t.lease and t.count and t.kind and t.suffix and popLanes and t.prefix, 'take: bad arguments')
  if popLanes > 0 then t.popLast = math.min(#KEYS, TAKE_FIRST - 1 + popLanes) end
  if t.nfilled then
    t.filled = KEYS[TAKE_FIRST]
    t.lanePrefix = string.sub(t.filled, 1, #t.filled - #FILLED_KEY) .. 'lane:'
  end
  return t
end

-- take_clock is the server's now, read once per take (by the first step
-- that needs it): the rate limits' checks, their logs and the lease tokens
-- all see the same time, so a token's time is the time its take counted at.
local function take_clock(t)
  if not t.us then t.msFloor, t.msCeil, t.us = now_ms() end
  return t.msFloor, t.msCeil, t.us
end

-- report_broken names key in the reply's broken keys (once).
local function report_broken(t, key)
  if t.brokenSeen[key] then return end
  t.brokenSeen[key] = true
  t.broken[#t.broken + 1] = key
end

-- take_reply is take.lua's one reply: status, then the wait (ms, for
-- REPLY_LIMITED: given as second) or the best priority left (asked with
-- MODE_TOP: t.top), the keys passed by, then the pairs taken (in t.out).
local function take_reply(t, status, second)
  local out = t.out
  out[1] = status or ''
  -- %d: tostring writes 14 significant digits (1.2345678901234e+14)
  if second then out[2] = second elseif t.wantTop and t.top then out[2] = string.format('%d', t.top) end
  out[3] = table.concat(t.broken, ' ')
  return out
end
