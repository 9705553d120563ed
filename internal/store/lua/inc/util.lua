-- inc/util.lua: key checks, chunked commands, the server clock, counts.
-- need raises WRONGTYPE, before any write, when key holds a type other than
-- want ('none' is always fine: the script creates it).
local function need(key, want)
  local got = redis.call('TYPE', key).ok
  if got ~= 'none' and got ~= want then
    error({err = 'WRONGTYPE prioq: ' .. key .. ' is a ' .. got .. ', want a ' .. want})
  end
end

-- count_add adds n to field of hash key, and drops the field when it falls
-- to 0 or below (the group counts, groups.go). pcall: a key of the wrong
-- type is passed by (counts are for Stats; no script fails for them).
local function count_add(key, field, n)
  local v = redis.pcall('HINCRBY', key, field, n)
  if type(v) == 'number' and v <= 0 then redis.pcall('HDEL', key, field) end
end

-- chunked runs `cmd key v1 v2 ...` in calls of at most CHUNK values (CHUNK
-- is even, so score/member pairs stay together).
local function chunked(cmd, key, vals)
  for i = 1, #vals, CHUNK do
    redis.call(cmd, key, unpack(vals, i, math.min(i + CHUNK - 1, #vals)))
  end
end

-- pchunked is chunked with redis.pcall: it stops at the first chunk that
-- fails and returns that error (a table with err), or nil.
local function pchunked(cmd, key, vals)
  for i = 1, #vals, CHUNK do
    local ok = redis.pcall(cmd, key, unpack(vals, i, math.min(i + CHUNK - 1, #vals)))
    if type(ok) == 'table' and ok.err then return ok end
  end
end

-- hmget reads any number of fields; missing ones come back false.
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, CHUNK do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

-- now_ms is the Redis server's clock in milliseconds: floored, to ask "has
-- this deadline passed?", and ceiled, to compute a deadline, so that nothing
-- is early by a fraction of a millisecond. Every deadline comes from here, not
-- from a host: a host with a wrong clock cannot expire another consumer's
-- lease or promote early. (Redis 7 replicates a script's effects, not the
-- script, so reading TIME is safe on replicas and in Cluster.)
local function now_ms()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), math.ceil(us / 1000), us
end

-- key_is reports whether key is missing or of Redis type want.
local function key_is(key, want)
  local t = redis.call('TYPE', key).ok
  return t == 'none' or t == want
end
