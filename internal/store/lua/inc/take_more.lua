-- inc/take_more.lua: the pops after a take's first, and what goes back.
-- include: take_group, take_popall, take_remains, util
--
-- take_more resolves the groups of the first pop (take_group) and, while
-- work remains and the take has fewer than t.count, pops again: a pop
-- takes from one lane, and the next lanes in order fill the rest, so that
-- a take for several consumers (Go merges them) serves all it can. A later
-- pop can fail (a lane of the wrong type after an emptied one): it checks
-- the type before it pops, so it wrote nothing, and the take stops there
-- with what it has. t.more: whether work remains, for the wake-up.
local function take_more(t, res)
  local count, pops = t.count, t.pops
  pops[1] = res
  local raw, got, want = #res[2], 0, count
  while true do
    take_group(t, res)
    t.more = remains(t, res[1], raw < want and not res.back, res[5])
    got = got + #res[2]
    if not t.more or got >= count then break end
    want = count - got
    res = take_pop(t, redis.pcall, false, want)
    if not res or res.err then break end
    pops[#pops + 1] = res
    raw = #res[2]
  end
  if t.requeued then t.more = true end
  if t.belowFloor then
    t.more = true
    if not t.top or t.belowFloor > t.top then t.top = t.belowFloor end
  end
end

-- take_floor (KIND_RANGE with a floor) puts back what a pop took below the
-- floor, same member, same score: its place is kept; the first one back is
-- then the segment's best, and the best left in the shard.
local function take_floor(t)
  if not t.floor or t.kind ~= KIND_RANGE then return end
  for _, p in ipairs(t.pops) do
    local keep, back = {}, {}
    for _, item in ipairs(p[2]) do
      if -tonumber(item[2]) < t.floor then
        back[#back + 1] = item[2]
        back[#back + 1] = item[1]
      else
        keep[#keep + 1] = item
      end
    end
    if #back > 0 then
      chunked('ZADD', p[1], back)
      p[2] = keep
      local best = -tonumber(back[1])
      if not t.top or best > t.top then t.top = best end
      t.more = true
    end
  end
end
