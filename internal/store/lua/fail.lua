-- fail.lua: end one delivery that did not succeed: retry it later or
-- dead-letter it.
--
-- include: checks, delayed, envelope, groupend, grouppush, lanes, order, parkentry, records, schedule, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:leases    ZSET
-- KEYS[2]   prioq:{Q}:inflight  HASH
-- KEYS[3]   prioq:{Q}:delayed   ZSET
-- KEYS[4]   prioq:{Q}:dstore    HASH
-- KEYS[5]   prioq:{Q}:dead      LIST
-- KEYS[6]   prioq:{Q}:wake      ZSET
-- KEYS[7]   prioq:{Q}:sched     LIST (ZSET for a shard of a queue of several)
-- KEYS[8]   prioq:{Q}:seq       STRING
-- KEYS[9..] every lane key, lane 0 first
-- ARGV[1]   lease token
-- ARGV[2]   retry delay (ms), counted from the server's now
-- ARGV[3]   reason (the last error)
-- ARGV[4]   max attempts
-- ARGV[5]   1 = lanes are lists, 2 = sorted sets
-- ARGV[6]   'retry', 'dead' (no more attempts) or 'bury' (dead, keeping the
--           envelope byte for byte: it did not decode)
-- ARGV[7]   2 = a shard of a queue of several (the sched key is a ZSET), else 1
-- Returns: 0 lease lost (nothing changed), 1 requeued or delayed, 2 dead.
-- The lease and its record are read and every key to write is checked before
-- the first write, which removes the lease (freeing memory: a retry runs at
-- maxmemory). A record that does not parse, or whose lane key holds the wrong
-- type, goes to the dead letters.
local token, delay, reason, maxa, kind, op = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), kind_of(ARGV[5]), ARGV[6]
local sharded = ARGV[7] == SHARDED
local now, nowc = now_ms()
local nlanes = #KEYS - 8
NLANES = nlanes
local off = 0
if kind == KIND_RANGE then off = SEQ_LEN end
if not redis.call('ZSCORE', KEYS[1], token) then return 0 end
local rec = redis.call('HGET', KEYS[2], token)

-- ended is the envelope whose lease ends here, once it is known (group_done).
local ended
local function finish()
  redis.call('ZREM', KEYS[1], token)
  redis.call('HDEL', KEYS[2], token)
  -- A group's slot comes back with its lease (and its parked markers).
  if ended and group_done(KEYS[9], kind, ended, token) then try_arm(KEYS[6], nil) end
end
local function bury(record)
  need(KEYS[5], 'list')
  finish()
  redis.call('RPUSH', KEYS[5], record)
  return 2
end

if not rec then
  -- A lease without a record cannot be redelivered: drop it.
  redis.call('ZREM', KEYS[1], token)
  return 0
end
local lane, score, member = routed(rec, nlanes, kind)
if not lane then
  local why = 'corrupt in-flight record'
  return bury(dead_record(UNKNOWN_LANE, '', now, why, rec))
end
local key = KEYS[9 + lane]
-- The stored attempts count the deliveries before this one (take does not
-- rewrite the message): this delivery makes a.
local a = attempts(member, off)
if a then a = a + 1 end
local env = string.sub(member, off + 1)
if #env == 0 then env = member end -- too short to hold a sequence: keep it whole
ended = env

local id = env_id(env, 0)
if op ~= FAIL_BURY and a and id then
  env = with_attempts(env, 0, a)
  member = with_attempts(member, off, a)
end
if op == FAIL_DEAD or op == FAIL_BURY or not a or not id or a >= maxa then
  return bury(dead_record(lane, score, now, reason, env))
end
local usable, why = lane_checker(9, kind)(lane, score)
if not usable then return bury(dead_record(lane, score, now, why, env)) end

-- requeue ends the delivery and puts the message at the tail of its lane
-- (a segment member sorts by its score and sequence), waking a consumer.
local function requeue()
  need(KEYS[6], 'zset')
  finish()
  push_one(key, kind, score, member, 'RPUSH') -- a segment's member keeps its place
  arm_wake(KEYS[6], prio_of(lane, score, kind))
  return 1
end

if delay <= 0 then return requeue() end
need_delayed(KEYS[3], KEYS[4], KEYS[7], sharded)
need(KEYS[6], 'zset')
-- The store is keyed by id: a record there under this id belongs to another
-- live message (one enqueued by an earlier version could share the id), and
-- scheduling would overwrite it. Retry at once instead.
if redis.call('HEXISTS', KEYS[4], id) == 1 then return requeue() end
need_seq(KEYS[8], 1)
finish()
schedule(KEYS[3], KEYS[4], KEYS[7], nowc + delay, redis.call('INCR', KEYS[8]), id, lane, score, env, nil, sharded)
return 1
