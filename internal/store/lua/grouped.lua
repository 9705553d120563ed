-- grouped.lua: store ready messages of groups (groups.go): the common case of
-- Group without an id of the caller's or a delay, which enqueue.lua also
-- handles, at a lower cost (a smaller script: issue 22's budget).
--
-- include: checks, envelope, grouppush, lanes, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:counts  HASH
-- KEYS[2]   prioq:{Q}:wake    ZSET
-- KEYS[3..] the lane keys the messages use
-- ARGV[1]   KIND_LEVELS, KIND_LISTS, KIND_FILLED or KIND_LISTS_FILLED
-- ARGV[2]   YES: arm the consumer wake-up (always, for groups: AtLeastOnce)
-- ARGV[3]   message count (Go caps it), then 3 fields per message: the KEYS
--           index of its lane, its score (Range: the segment score, '' for
--           Levels) and its envelope (version 3, of a group)
-- Returns: the count. All or none: the lanes (and for Range the
-- priorities' lists) and the wake-up are checked before the first write;
-- at maxmemory that write is refused and nothing is stored. Each message
-- goes to its group's list, and its group's marker into the lane when that
-- list was empty (inc/grouppush.lua group_push), in the order given.
local kind, arm, n = kind_of(ARGV[1]), ARGV[2] == YES, tonumber(ARGV[3])
local checked = {}
for i = 0, n - 1 do
  local ki, score, env = tonumber(ARGV[4 + i * 3]), ARGV[5 + i * 3], ARGV[6 + i * 3]
  local key = ki and KEYS[ki]
  if not key or not env or not env_group(env) then error('grouped: message ' .. i .. ' is not a lane index, score and envelope of a group') end
  if kind == KIND_LISTS and not string.match(score, '^-?%d+$') then error('grouped: message ' .. i .. ' has score ' .. score) end
  need_lane(checked, key, kind, score)
end
if arm then need(KEYS[2], 'zset') end
-- best: the best priority a marker made ready (the wake-up's score: see
-- arm_wake), a level's number or a segment score's opposite.
local best
for i = 0, n - 1 do
  local ki, score, env = tonumber(ARGV[4 + i * 3]), ARGV[5 + i * 3], ARGV[6 + i * 3]
  if score == '' then score = nil end
  if group_push(KEYS[ki], kind, score, env, 'RPUSH', env_group(env)) then
    local p = score and -tonumber(score) or tonumber(string.match(KEYS[ki], '(%d+)$'))
    if not best or p > best then best = p end
  end
end
if best and arm then arm_wake(KEYS[2], best) end
-- The total is for rates only (pcall, last), as enqueue.lua's.
redis.pcall('HINCRBY', KEYS[1], COUNT_ENQUEUED, n)
return n
