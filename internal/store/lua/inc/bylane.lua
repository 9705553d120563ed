-- inc/bylane.lua: writing many messages, lane by lane.
-- include: envelope, grouppush, lanes, util
-- by_lane collects {score, value} pairs per lane in the order they come, for
-- lanes whose type the caller checked (usable(), or need()). It returns
-- add(lane, score, value) and flush(listcmd, seq), which writes them, lane by
-- lane in the order first seen, one command per lane (per CHUNK): the values
-- with listcmd (RPUSH at the tail, LPUSH at the head) into lists; the pairs
-- as they are into sorted sets, or, given seq, with fresh sequence numbers
-- seq+1, seq+2, ... in front of the values. flush reports whether a lane
-- went from empty to holding something (always, for sorted sets), the moment
-- idle consumers may be waiting for it.
local function by_lane(base, kind)
  local order, lists, lanes = {}, {}, {}
  local function add(lane, score, value)
    -- KIND_LISTS: one group per priority list, each with its own lane.
    local g = lane
    if kind == KIND_LISTS then g = lane .. '|' .. prio_str(score) end
    local l = lists[g]
    if not l then
      l = {}
      lists[g] = l
      lanes[g] = lane
      order[#order + 1] = g
    end
    l[#l + 1] = score
    l[#l + 1] = value
    -- A message of a group goes to its group's list, in its place among
    -- the others of its lane (flush keeps their order).
    local grp = kind ~= KIND_RANGE and env_group(value)
    if grp then
      l.groups = l.groups or {}
      l.groups[#l / 2] = grp
    end
  end
  -- push_run writes vals, values without a group, into lane key key (and
  -- for KIND_LISTS the list of priority prio) with listcmd; reports whether
  -- a level went from empty to holding something.
  local function push_run(key, prio, score, vals, listcmd)
    if #vals == 0 then return false end
    if kind == KIND_LISTS then
      chunked(listcmd, plist_key(key, prio), vals)
      redis.call('ZADD', key, score, prio)
      name_lane(key)
      return true
    end
    local woke = false
    for i = 1, #vals, CHUNK do
      local last = math.min(i + CHUNK - 1, #vals)
      local len = redis.call(listcmd, key, unpack(vals, i, last))
      if i == 1 and len == last then woke = true end
    end
    name_lane(key)
    return woke
  end
  local function flush(listcmd, seq)
    local woke = false
    for _, g in ipairs(order) do
      local l, key = lists[g], KEYS[base + lanes[g]]
      local vals = {}
      if kind ~= KIND_RANGE then
        local prio = kind == KIND_LISTS and prio_str(l[1]) or nil
        for j = 2, #l, 2 do
          local grp = l.groups and l.groups[j / 2]
          if grp then
            if push_run(key, prio, l[1], vals, listcmd) then woke = true end
            vals = {}
            if group_push(key, kind, l[j - 1], l[j], listcmd, grp) then woke = true end
          else
            vals[#vals + 1] = l[j]
          end
        end
        if push_run(key, prio, l[1], vals, listcmd) then woke = true end
      elseif seq then
        for j = 1, #l, 2 do
          seq = seq + 1
          vals[#vals + 1] = l[j]
          vals[#vals + 1] = seqbytes(seq) .. l[j + 1]
        end
        chunked('ZADD', key, vals)
        woke = true
      else
        chunked('ZADD', key, l)
        woke = true
      end
    end
    return woke
  end
  return add, flush
end
