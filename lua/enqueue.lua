-- enqueue.lua: store a batch of messages, ready or delayed, in one call.
--
-- KEYS[1]   prioq:{Q}:ids      SET   caller-given ids of live messages
-- KEYS[2]   prioq:{Q}:seq      STRING FIFO counter for range segments
-- KEYS[3]   prioq:{Q}:delayed  ZSET  id -> due (ms)
-- KEYS[4]   prioq:{Q}:dstore   HASH  id -> "lane|score|envelope"
-- KEYS[5]   prioq:{Q}:sched    LIST  promoter wake-up marker (length ≤ 1)
-- KEYS[6]   prioq:{Q}:wake     ZSET  consumer wake-up marker (one member)
-- KEYS[7..] the lane keys this batch uses
-- ARGV[1]   now (ms)
-- ARGV[2]   1 = arm the consumer wake-up (AtLeastOnce), 0 = consumers block on lanes
-- ARGV[3]   1 = lanes are lists (levels), 2 = sorted sets (range)
-- ARGV[4]   message count, then 7 fields per message:
--           id, caller id (0/1), due (ms), lane (index into all lanes),
--           KEYS index of that lane, score (range only), envelope
-- Returns: one integer per message: 1 stored, 0 duplicate id (nothing written).
local now, arm, kind, n = tonumber(ARGV[1]), ARGV[2] == '1', tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
local earliest -- due time at the head of the delayed set, read lazily
local ready = false

local function seqbytes(s)
  -- 8-byte big-endian: members of equal score sort bytewise, i.e. by seq.
  local b = {}
  for i = 8, 1, -1 do
    b[i] = s % 256
    s = math.floor(s / 256)
  end
  return string.char(unpack(b))
end

for i = 0, n - 1 do
  local base = 5 + i * 7
  local id, caller, due = ARGV[base], ARGV[base + 1] == '1', tonumber(ARGV[base + 2])
  local lane, key, score, env = ARGV[base + 3], KEYS[tonumber(ARGV[base + 4])], ARGV[base + 5], ARGV[base + 6]
  if caller and redis.call('SADD', KEYS[1], id) == 0 then
    out[#out + 1] = 0
  else
    out[#out + 1] = 1
    if due > now then
      if earliest == nil then
        local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
        earliest = head[2] and tonumber(head[2]) or math.huge
      end
      redis.call('ZADD', KEYS[3], due, id)
      redis.call('HSET', KEYS[4], id, lane .. '|' .. score .. '|' .. env)
      if due < earliest then
        -- The promoters sleep until the old head's due time: wake one of them.
        -- A list of length ≤ 1 keeps the marker bounded.
        earliest = due
        if redis.call('LLEN', KEYS[5]) == 0 then redis.call('RPUSH', KEYS[5], '1') end
      end
    elseif kind == 1 then
      -- A lane going from empty to non-empty is the only moment idle consumers
      -- can be waiting for it; takers re-arm while work remains.
      if redis.call('RPUSH', key, env) == 1 then ready = true end
    else
      redis.call('ZADD', key, score, seqbytes(redis.call('INCR', KEYS[2])) .. env)
      ready = true
    end
  end
end
if arm and ready then redis.call('ZADD', KEYS[6], 0, 'w') end
return out
