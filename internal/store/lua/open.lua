-- open.lua: create a queue's meta record, or return the one already there.
--
-- (keys.go describes every key.)
-- KEYS[1]  prioq:{Q}:meta  HASH
-- ARGV[1]  layout, e.g. "levels:3" or "range:-100:100:8"
-- ARGV[2]  delivery mode, "at-least-once" or "at-most-once"
-- ARGV[3]  storage format version
-- ARGV[4]  shards ('' for one: no shards field, as before shards existed)
-- Returns: {layout, mode, format, shards} as stored (shards false when
-- absent: one); the caller compares. Creating and
-- reading in one script means two processes opening a new queue with different
-- configs cannot both succeed.
local meta = KEYS[1]
if redis.call('EXISTS', meta) == 0 then
  if ARGV[4] == '' then
    redis.call('HSET', meta, 'layout', ARGV[1], 'mode', ARGV[2], 'format', ARGV[3])
  else
    redis.call('HSET', meta, 'layout', ARGV[1], 'mode', ARGV[2], 'format', ARGV[3], 'shards', ARGV[4])
  end
end
return redis.call('HMGET', meta, 'layout', 'mode', 'format', 'shards')
