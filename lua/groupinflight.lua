-- groupinflight.lua: how many messages of each group are in flight, for
-- Queue.Groups. Reads only.
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:inflight  HASH
-- Returns: {group, count, group, count, ...}. O(messages in flight): each
-- in-flight record ("lane|score|" and the envelope) is read for its group.
local counts, order = {}, {}
if redis.call('TYPE', KEYS[1]).ok == 'hash' then
  for _, rec in ipairs(redis.call('HVALS', KEYS[1])) do
    local p2 = routing_end(rec)
    local g = p2 and env_group(string.sub(rec, p2 + 1))
    if g then
      if not counts[g] then order[#order + 1] = g end
      counts[g] = (counts[g] or 0) + 1
    end
  end
end
local out = {}
for _, g in ipairs(order) do
  out[#out + 1] = g
  out[#out + 1] = counts[g]
end
return out
