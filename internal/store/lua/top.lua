-- top.lua: the best priority among a shard's ready messages, for a consumer
-- of a queue of several shards that must choose the shard to take from.
--
-- include: index, lanes
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:paused    LIST/ZSET
-- KEYS[2..] lane keys, highest lane first
-- ARGV[1]   1 = lanes are lists, 2 = sorted sets
-- Returns: '' when the shard is paused or nothing is ready, else the best
-- priority: the lane of the first non-empty list, or for a segment the
-- priority of its lowest score (Range of format 4: the first member of its
-- index that names a priority). Reads only; a lane of the wrong type is
-- passed by (takes pass it by too).
local kind = kind_of(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then return '' end
for i = 2, #KEYS do
  if kind == KIND_LEVELS then
    if redis.call('TYPE', KEYS[i]).ok == 'list' then return string.match(KEYS[i], '(%d+)$') end
  elseif kind == KIND_LISTS then
    -- The first member that names a priority: one that names none (a hand
    -- edit, inc/index.lua index_prio) says nothing of the segment's messages.
    local p = index_head(KEYS[i])
    if p then return string.format('%d', p) end
  else
    local head = redis.pcall('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
    -- %d: tostring writes 14 significant digits (9.007199254741e+15)
    if not head.err and head[2] then return string.format('%d', -tonumber(head[2])) end
  end
end
return ''
