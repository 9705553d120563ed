-- inc/take_lists.lua: the pops of a KIND_LISTS take without the filled
-- index.
-- include: index, lanes, take_aside, take_list, take_pop
--
-- pop_lists takes the best priority's name from the first non-empty index
-- (take_mpop, as from a segment), then up to want messages from that
-- priority's list (take_pop_list), and puts the name back while the list
-- holds more. A name whose list is empty or not a list is dropped and the
-- next one popped. A member that names no priority is set aside
-- (set_aside) and the next one popped; one that names a priority under
-- another score (a hand edit) goes back under its priority's score, so that
-- what a take records of it (its score) says its priority, and is popped in
-- its turn. A name below the floor goes back untouched and ends the take
-- (t.belowFloor: its priority).
local function pop_lists(t, call, paused, want)
  while true do
    if t.lanes and t.popN == 0 then return nil end
    local res = take_mpop(t, call, paused, 1)
    if not res or res.err or res[1] == KEYS[1] then return res end
    local seg, prio, score = res[1], res[2][1][1], res[2][1][2]
    local n = index_prio(prio)
    if not n then
      if not set_aside(t, seg, prio, score) then pass_by(t, seg) end
    elseif tonumber(score) ~= -n then
      redis.call('ZADD', seg, -n, prio)
    elseif t.floor and n < t.floor then
      redis.call('ZADD', seg, score, prio)
      t.belowFloor = n
      return nil
    else
      local p = take_pop_list(t, seg, plist_key(seg, prio), seg, prio, score, want, true)
      if p then return p end
    end
    paused = false -- a name popped: the paused key was empty
  end
end

-- pop_hinted is pop_lists without writing the index while a list stays
-- non-empty: when the paused key and every lane ahead of the guessed one
-- (t.hint) are empty (one EXISTS), it reads the guessed segment's best name
-- (ZRANGE) and pops from its list, removing the name only when the list
-- empties. Under load that saves ZMPOP's pop and the ZADD putting the name
-- back. Any surprise (a wrong guess, a wrong type, a name without a list)
-- returns nil, and pop_lists goes on.
local function pop_hinted(t, want)
  local k = TAKE_FIRST - 1 + t.hint
  if k > t.popLast or t.floor then return nil end
  local ahead = {KEYS[1]}
  for j = TAKE_FIRST, k - 1 do ahead[#ahead + 1] = KEYS[j] end
  if redis.call('EXISTS', unpack(ahead)) > 0 then return nil end
  local head = redis.pcall('ZRANGE', KEYS[k], 0, 0, 'WITHSCORES')
  if head.err or not head[1] then return nil end
  local prio, score = head[1], head[2]
  local n = index_prio(prio)
  if not n or tonumber(score) ~= -n then return nil end
  local p = take_pop_list(t, KEYS[k], plist_key(KEYS[k], prio), KEYS[k], prio, score, want, false)
  if p and not p.err then return p end
  return nil
end
