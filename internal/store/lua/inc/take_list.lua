-- inc/take_list.lua: the pop step every pop but the multi-key one shares.
-- include: take_state
--
-- take_pop_list pops up to want messages from list, which member of index
-- names: a level's lane (the filled index names it; lane is list, score
-- nil) or a priority's list (a segment's index, lane, names it under
-- score). held: the take took the name out of the index (ZMPOP) and puts it
-- back while the list holds more; else it read the name (ZRANGE) and
-- removes it once the list is empty. A name whose list is empty (its
-- messages cancelled) or of the wrong type (nothing of prioq's is in it:
-- writers check a lane's type first; reported) is dropped: false. An error
-- of another kind (an ACL, a cluster refusal) is returned with the name
-- back where it was. Else the pop: {lane, messages}, and for a priority's
-- list the list, score and whether it holds more. (A level's name is not
-- asked for more: it stays until a pop takes fewer than asked, or until
-- the take asks whether work remains.)
local function take_pop_list(t, lane, list, index, member, score, want, held)
  local items = redis.pcall('LPOP', list, want)
  if type(items) == 'table' and items.err then
    if not string.find(items.err, 'WRONGTYPE', 1, true) then
      if held then redis.call('ZADD', index, score, member) end
      return items
    end
    report_broken(t, list)
    items = false
  end
  if not items then
    if not held then redis.call('ZREM', index, member) end
    return false
  end
  local more = #items == want
  if score and more then more = redis.call('EXISTS', list) == 1 end
  if held then
    if more then redis.call('ZADD', index, score, member) end
  elseif not more then
    redis.call('ZREM', index, member)
  end
  if not score then return {lane, items} end
  return {lane, items, list, score, more}
end
