-- inc/checks.lua: checks before a write: lanes, the FIFO counter.
-- include: lanes, util
-- need_lane checks, before a write, that lane key `key` and, for
-- KIND_LISTS, the list of score's priority can take a push (need: missing
-- or of the lane's type), each key once per script (checked: the keys seen).
local function need_lane(checked, key, kind, score)
  if not checked[key] then
    need(key, lane_type(kind))
    checked[key] = true
  end
  if kind == KIND_LISTS then
    local list = plist_key(key, prio_str(score))
    if not checked[list] then
      need(list, 'list')
      checked[list] = true
    end
  end
end

-- need_seq checks the FIFO counter can be incremented n times more.
local function need_seq(key, n)
  local v = redis.call('GET', key) -- WRONGTYPE for a non-string
  -- INCR takes no leading zero (nor "+" or spaces): only what it takes passes.
  if v and not ((v == '0' or string.match(v, '^[1-9]%d*$')) and tonumber(v) + n < MAX_SEQ) then
    error({err = 'ERR prioq: ' .. key .. ' does not hold a usable counter'})
  end
end

-- lane_checker returns usable(lane, score): whether KEYS[base + lane]
-- can take the layout's lane writes (it is missing or of the lane type) and,
-- for KIND_LISTS, whether the list of score's priority can, each key asked
-- once; and the reason to bury a message when it cannot: a key of the
-- wrong type (a hand edit, a bug) must not stop the other lanes.
local function lane_checker(base, kind)
  local seen = {}
  local function check(key, want)
    local why = seen[key]
    if why == nil then
      local got = redis.call('TYPE', key).ok
      why = false
      if got ~= 'none' and got ~= want then why = 'lane ' .. key .. ' is a ' .. got .. ', not a ' .. want end
      seen[key] = why
    end
    return why
  end
  return function(lane, score)
    local key = KEYS[base + lane]
    local why = check(key, lane_type(kind))
    if not why and kind == KIND_LISTS and score then why = check(plist_key(key, prio_str(score)), 'list') end
    return not why, why or nil
  end
end
