-- inc/take_group.lua: the messages of groups in a pop.
-- include: each, envelope, push, rates, take_glimit
--
-- take_group resolves pop p's markers: under its group's limits, a
-- marker's group's next message replaces it in the pop (LPOP of the
-- group's list), and while the group has more the marker goes back to the
-- tail of its lane (push_entry): the groups with work at a priority are
-- served in turn, each first in, first out. At a limit, the marker is
-- parked (G_PARK, written at the end, take_groups_end) until a lease of
-- the group ends (group_done), or for a rate its time to come back (when
-- the oldest take that keeps it there leaves the window) is set in G_DUE,
-- where a promoter finds it. A marker whose group's list is empty (its
-- messages cancelled) is dropped. take_undo reverses the rest (p.groups:
-- {group list, message, list, marker back, marker}).
local function take_group(t, p)
  if t.kind == KIND_RANGE then return end
  local items, kept, G = p[2], nil, t.G
  for j, item in ipairs(items) do
    local b, g = string.byte(item, 1), nil
    if b == 0 then g = marker_group(item) elseif b == ENV_V3 then g = env_group(item) end
    if g then
      G = G or groups_begin(t)
      if not kept then
        -- (A loop, not unpack: a pop of MaxBatch holds more than the
        -- ~8,000 values unpack takes, and this is past the pop.)
        kept = {}
        for k = 1, j - 1 do kept[k] = items[k] end
        p.orig, p.groups = items, {}
      end
      local taken = G.taken[g] or 0
      if b ~= 0 then
        -- A message of a group in the lane itself (group_push passed its
        -- group's list by): delivered as it is, counted in flight.
        kept[#kept + 1] = item
        G.taken[g] = taken + 1
      else
        local lim, list = group_limit(t, g), p[3] or p[1]
        local atRate = lim and lim.r and lim.m + taken >= lim.r
        if lim and (atRate or (lim.c and lim.n + taken >= lim.c)) then
          G.park[g] = (G.park[g] and G.park[g] .. ' ' or '') .. string.match(p[1], '(%d+)$') .. '|' .. (p[4] or '')
          G.marks = G.marks + 1
          if atRate then G.due[g] = math.ceil(rate_due(lim.log, lim.m, taken, lim.r, lim.per, t.us) / 1000) end
        else
          local glist = list .. G_LIST .. g
          local msg = redis.pcall('LPOP', glist)
          if type(msg) == 'string' then
            kept[#kept + 1] = msg
            G.taken[g], G.ready[g] = taken + 1, (G.ready[g] or 0) + 1
            local back = redis.call('EXISTS', glist) == 1
            if back then
              push_entry(p[1], t.kind, p[4], item, 'RPUSH')
              -- The lane (or priority's list) holds it again: not emptied.
              t.requeued, p.back = true, true
              if t.kind == KIND_LISTS then p[5] = true end
            else
              G.marks = G.marks + 1
            end
            p.groups[#p.groups + 1] = {glist, msg, list, back, item}
          else
            G.marks = G.marks + 1
          end
        end
      end
    elseif kept then
      kept[#kept + 1] = item
    end
  end
  if kept then p[2] = kept end
end
