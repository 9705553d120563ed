-- release.lua: give deliveries back untouched, in one call: what a closing
-- consumer held but never handed out.
--
-- include: bylane, checks, groupend, lanes, order, parkentry, records, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:leases    ZSET
-- KEYS[2]   prioq:{Q}:inflight  HASH
-- KEYS[3]   prioq:{Q}:dead      LIST
-- KEYS[4]   prioq:{Q}:wake      ZSET
-- KEYS[5..] every lane key, lane 0 first
-- ARGV[1]   1 = lanes are lists, 2 = sorted sets
-- ARGV[2..] lease tokens, in the order their messages were taken
-- Returns: how many came back to their lanes.
-- Each message goes back to the head of its lane as it was taken (this
-- delivery not counted), the first token's first, so they are served next in
-- their old order. A token whose lease is gone (expired and taken again) is
-- skipped: that delivery is no longer this consumer's. A record that does not
-- parse, or whose lane key holds the wrong type, goes to the dead letters.
-- Everything is read and checked first; the first writes remove the leases
-- (freeing memory), so a release runs at maxmemory. Releasing acknowledges
-- nothing to a caller, so Go does not WAIT for replicas after it.
local kind = kind_of(ARGV[1])
local nlanes = #KEYS - 4
NLANES = nlanes
local now = now_ms()
need(KEYS[2], 'hash')
local tokens = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then tokens[#tokens + 1] = ARGV[i] end
end
if #tokens == 0 then return 0 end
local recs = hmget(KEYS[2], tokens)
local add, flush = by_lane(5, kind)
local usable = lane_checker(5, kind)
local back, deads, best = 0, {}, nil
local ended = {} -- {envelope, token} of the leases ending here (group_done)
-- Last first: LPUSH puts its last value at the head, so the first token's
-- message ends up first.
for i = #tokens, 1, -1 do
  local rec = recs[i]
  if rec then
    local lane, score, member = routed(rec, nlanes, kind)
    local ok, why = false, 'corrupt in-flight record'
    if lane then
      ok, why = usable(lane, score)
      if kind ~= KIND_RANGE then ended[#ended + 1] = {member, tokens[i]} end
    end
    if ok then
      add(lane, score, member)
      back = back + 1
      local p = prio_of(lane, score, kind)
      if not best or p > best then best = p end
    elseif lane then
      local off = 0
      if kind == KIND_RANGE then off = SEQ_LEN end
      deads[#deads + 1] = dead_record(lane, score, now, why, string.sub(member, off + 1))
    else
      deads[#deads + 1] = dead_record(UNKNOWN_LANE, '', now, why, rec)
    end
  end
end
if #deads > 0 then need(KEYS[3], 'list') end
if back > 0 or #ended > 0 then need(KEYS[4], 'zset') end

chunked('ZREM', KEYS[1], tokens)
chunked('HDEL', KEYS[2], tokens)
-- The leases end before the messages go back (as in sweep.lua): a group's
-- parked marker is back in its lane for the push to move to the head.
local unparked = false
for _, e in ipairs(ended) do
  if group_done(KEYS[5], kind, e[1], e[2]) then unparked = true end
end
flush('LPUSH')
if #deads > 0 then chunked('RPUSH', KEYS[3], deads) end
if back > 0 or unparked then arm_wake(KEYS[4], best) end
return back
