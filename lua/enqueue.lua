-- enqueue.lua: store a batch of messages, ready or delayed, in one call.
--
-- KEYS[1]   prioq:{Q}:ids      SET   caller-given ids of live messages
-- KEYS[2]   prioq:{Q}:seq      STRING sequence counter (FIFO order in segments and among equal due times)
-- KEYS[3]   prioq:{Q}:delayed  ZSET  seq‖id -> due (ms)
-- KEYS[4]   prioq:{Q}:dstore   HASH  id -> "lane|score|" seq‖envelope
-- KEYS[5]   prioq:{Q}:sched    LIST  promoter wake-up marker (length ≤ 1)
-- KEYS[6]   prioq:{Q}:wake     ZSET  consumer wake-up marker (one member)
-- KEYS[7..] the lane keys this batch uses
-- ARGV[1]   1 = arm the consumer wake-up (AtLeastOnce), 0 = consumers block on lanes
-- ARGV[2]   1 = lanes are lists (levels), 2 = sorted sets (range)
-- ARGV[3]   message count (Go caps it at MaxBatch), then 7 fields per message:
--           id, caller id (0/1), due, lane (index into all lanes), KEYS index
--           of that lane, score (range only), envelope. due is '' (ready
--           now), '+ms' (that long after the server's now) or 'ms' (that unix
--           time, the caller's wall clock: ready now if it has passed).
-- Returns: one integer per message: 1 stored, 0 duplicate id (nothing written).
-- All or none: every key the batch writes is checked first, so a key of the
-- wrong type fails the call before its first write. At maxmemory the first
-- write is refused and nothing is stored.
local arm, kind, n = ARGV[1] == YES, tonumber(ARGV[2]), tonumber(ARGV[3])
local now, nowc = now_ms()

-- Read and check: when each message is due, which keys the batch writes, how
-- many sequence numbers it needs.
local dues, seqs = {}, 0
local callers, delayed, ready = false, false, false
local laneChecked = {}
for i = 0, n - 1 do
  local base = 4 + i * 7
  local d = ARGV[base + 2]
  local due = now
  if d ~= '' then
    if string.sub(d, 1, 1) == '+' then due = nowc + tonumber(string.sub(d, 2)) else due = tonumber(d) end
  end
  dues[i] = due
  if ARGV[base + 1] == YES then callers = true end
  if due > now then
    delayed = true
    seqs = seqs + 1
  else
    ready = true
    if kind == KIND_RANGE then seqs = seqs + 1 end
    local ki = tonumber(ARGV[base + 4])
    if not laneChecked[ki] then
      need(KEYS[ki], lane_type(kind))
      laneChecked[ki] = true
    end
  end
end
if callers then need(KEYS[1], 'set') end
if delayed then
  need(KEYS[3], 'zset')
  need(KEYS[4], 'hash')
  need(KEYS[5], 'list')
end
if seqs > 0 then need_seq(KEYS[2], seqs) end
if arm and ready then need(KEYS[6], 'zset') end

-- Write. One INCRBY reserves the batch's sequence numbers, in batch order.
local seq = 0
if seqs > 0 then seq = redis.call('INCRBY', KEYS[2], seqs) - seqs end
local out = {}
local earliest -- due time at the head of the delayed set, read lazily
local woke = false
for i = 0, n - 1 do
  local base = 4 + i * 7
  local id, caller, due = ARGV[base], ARGV[base + 1] == YES, dues[i]
  local lane, key, score, env = ARGV[base + 3], KEYS[tonumber(ARGV[base + 4])], ARGV[base + 5], ARGV[base + 6]
  if due > now or kind == KIND_RANGE then seq = seq + 1 end
  if caller and redis.call('SADD', KEYS[1], id) == 0 then
    out[#out + 1] = 0
  else
    out[#out + 1] = 1
    if due > now then
      if earliest == nil then
        local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
        earliest = head[2] and tonumber(head[2]) or math.huge
      end
      redis.call('ZADD', KEYS[3], due, delayed_member(seq, id))
      redis.call('HSET', KEYS[4], id, lane .. '|' .. score .. '|' .. seqbytes(seq) .. env)
      if due < earliest then
        -- The promoters sleep until the old head's due time: wake one of them.
        -- A list of length ≤ 1 keeps the marker bounded.
        earliest = due
        if redis.call('LLEN', KEYS[5]) == 0 then redis.call('RPUSH', KEYS[5], SCHED) end
      end
    elseif kind == KIND_LEVELS then
      -- A lane going from empty to non-empty is the only moment idle consumers
      -- can be waiting for it; takers re-arm while work remains.
      if redis.call('RPUSH', key, env) == 1 then woke = true end
    else
      redis.call('ZADD', key, score, seqbytes(seq) .. env)
      woke = true
    end
  end
end
if arm and woke then redis.call('ZADD', KEYS[6], 0, WAKE) end
return out
