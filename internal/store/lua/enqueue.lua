-- enqueue.lua: store a batch of messages, ready or delayed, in one call.
--
-- include: bylane, checks, delayed, envelope, lanes, once, order, records, schedule, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:ids      SET
-- KEYS[2]   prioq:{Q}:seq      STRING
-- KEYS[3]   prioq:{Q}:delayed  ZSET
-- KEYS[4]   prioq:{Q}:dstore   HASH
-- KEYS[5]   prioq:{Q}:sched    LIST (ZSET for a shard of a queue of several)
-- KEYS[6]   prioq:{Q}:wake     ZSET
-- KEYS[7]   prioq:{Q}:counts   HASH
-- KEYS[8..] the lane keys this batch uses
-- ARGV[1]   1 = arm the consumer wake-up (AtLeastOnce), 0 = consumers block on
--           lanes, 2 = arm it, and this is a shard of a queue of several
-- ARGV[2]   KIND_LEVELS, KIND_RANGE or KIND_LISTS (protocol.go)
-- ARGV[3]   message count (Go caps it at MaxBatch), then 8 fields per message:
--           id, caller id (0/1), due, lane (index into all lanes), KEYS index
--           of that lane, score (range only), envelope, once. due is '' (ready
--           now), '+ms' (that long after the server's now) or 'ms' (that unix
--           time, the caller's wall clock: ready now if it has passed). once
--           is '' or a unique window or a debounce (inc/once.lua), whose key
--           is among KEYS[8..].
-- Returns: one reply per message: 1 stored, 0 refused (a duplicate id, or
-- its unique window open: nothing written), or '=' and the id of the
-- pending message of its debounce key that it was folded into (mode f: that
-- message stays, due now when this one would have been; mode l replaces it
-- and replies 1).
-- All or none: every key the batch writes is checked first, so a key of the
-- wrong type fails the call before its first write. At maxmemory the first
-- write is refused and nothing is stored.
local arm, sharded, kind, n = ARGV[1] ~= NO, ARGV[1] == SHARDED, kind_of(ARGV[2]), tonumber(ARGV[3])
local now, nowc -- the server's clock, read only when a message has a due time

-- Read and check: when each message is due (false: ready now), which keys
-- the batch writes, how many sequence numbers it needs.
local dues, onces, seqs = {}, {}, 0
local callers, delayed, ready = false, false, false
local laneChecked = {}
for i = 0, n - 1 do
  local base = 4 + i * 8
  -- Every field present before the first write: a missing one would fail it
  -- half-way through the batch.
  if not ARGV[base + 7] then error('enqueue: message ' .. i .. ' has fewer than 8 fields') end
  local okind, okey, oms, omode = once_parse(ARGV[base + 7])
  if okind then
    need(okey, 'string')
    onces[i] = {okind, okey, oms, omode}
    if not now then now, nowc = now_ms() end
  end
  local d = ARGV[base + 2]
  local due = false
  if d ~= '' then
    if not now then now, nowc = now_ms() end
    if string.sub(d, 1, 1) == '+' then due = nowc + tonumber(string.sub(d, 2)) else due = tonumber(d) end
    if due <= now then due = false end -- its time has passed: ready now
  end
  dues[i] = due
  if okind == 'b' and not due then error('enqueue: a debounced message must be delayed') end
  if ARGV[base + 1] == YES then callers = true end
  if due then
    delayed = true
    seqs = seqs + 1
  else
    ready = true
    if kind == KIND_RANGE then seqs = seqs + 1 end
    need_lane(laneChecked, KEYS[tonumber(ARGV[base + 4])], kind, ARGV[base + 5])
  end
end
if callers then
  need(KEYS[1], 'set')
  need(KEYS[4], 'hash')
end
if delayed then need_delayed(KEYS[3], KEYS[4], KEYS[5], sharded) end
if seqs > 0 then need_seq(KEYS[2], seqs) end
if arm then need(KEYS[6], 'zset') end

-- Write. One INCRBY reserves the batch's sequence numbers, in batch order.
local seq = 0
if seqs > 0 then seq = redis.call('INCRBY', KEYS[2], seqs) - seqs end
local out, stored = {}, 0
local earliest -- due time at the head of the delayed set, read lazily
-- What goes into each lane, in batch order, by KEYS index (base 0): the
-- lanes' types were checked above.
local add, flush = by_lane(0, kind)
local best -- the best priority made ready
for i = 0, n - 1 do
  local base = 4 + i * 8
  local id, caller, due = ARGV[base], ARGV[base + 1] == YES, dues[i]
  local o = onces[i] or {}
  local refused, folded = o[1] == 'u' and unique_open(o[2], o[3], now), nil
  if o[1] == 'b' then
    local pend, member, rec = debounce_pending(o[2], KEYS[3], KEYS[4])
    if pend and o[4] == 'f' then
      -- The first message stays, due when this one would have been (and
      -- the promoters told when that is earlier than the head).
      redis.call('ZREM', KEYS[3], member)
      local p2, p1 = routing_end(rec)
      earliest = schedule(KEYS[3], KEYS[4], KEYS[5], due, seq, pend, string.sub(rec, 1, p1 - 1),
        string.sub(rec, p1 + 1, p2 - 1), string.sub(rec, p2 + SEQ_LEN + 1), nil, sharded)
      redis.call('SET', o[2], delayed_member(seq, pend), 'PX', o[3] + DEBOUNCE_KEEP)
      folded = pend
    elseif pend then
      -- The last one wins: the pending message goes, this one is stored.
      redis.call('HDEL', KEYS[4], pend)
      redis.call('ZREM', KEYS[3], member)
    end
  end
  local lane, ki, score, env = ARGV[base + 3], tonumber(ARGV[base + 4]), ARGV[base + 5], ARGV[base + 6]
  if due or kind == KIND_RANGE then seq = seq + 1 end
  -- A caller id is taken while the ids set has it, and also while a delayed
  -- record is stored under it: the store is keyed by id, and a message of an
  -- earlier version may hold it with a generated id of the same form.
  if folded then
    out[#out + 1] = '=' .. folded
  elseif refused or caller and (redis.call('HEXISTS', KEYS[4], id) == 1 or redis.call('SADD', KEYS[1], id) == 0) then
    out[#out + 1] = 0
  else
    out[#out + 1] = 1
    stored = stored + 1
    if o[1] == 'u' then unique_mark(o[2], o[3], now) end
    if o[1] == 'b' then redis.call('SET', o[2], delayed_member(seq, id), 'PX', o[3] + DEBOUNCE_KEEP) end
    if due then
      earliest = schedule(KEYS[3], KEYS[4], KEYS[5], due, seq, id, lane, score, env, earliest, sharded)
    else
      if kind == KIND_RANGE then add(ki, score, seqbytes(seq) .. env) else add(ki, score, env) end
      local p = prio_of(lane, score, kind)
      if not best or p > best then best = p end
    end
  end
end
-- One push per lane (per CHUNK), not one per message. Only a lane going from
-- empty to non-empty can have idle consumers waiting for it; takers re-arm
-- while work remains.
if flush('RPUSH') and arm then arm_wake(KEYS[6], best) end
-- The total is for rates only: a counts key that cannot take it (wrong type)
-- must not fail a batch already stored, hence pcall, and it comes last.
if stored > 0 then redis.pcall('HINCRBY', KEYS[7], COUNT_ENQUEUED, stored) end
return out
