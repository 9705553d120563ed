-- inc/take_popall.lua: a take's pop step, whatever the way it pops.
-- include: take_lists, take_popfilled
--
-- take_pop is the pop step of a take: with the filled index, or for
-- KIND_LISTS with a hint (first pop only, every lane), or base_pop.
local function take_pop(t, call, paused, want)
  if t.filled then return pop_filled(t, call, paused, want) end
  if t.hint and t.kind == KIND_LISTS and paused and not t.lanes then
    local res = pop_hinted(t, want)
    if res then return res end
  end
  return base_pop(t, call, paused, want)
end
