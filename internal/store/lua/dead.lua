-- dead.lua: requeue or purge dead-letter records.
--
-- include: checks, envelope, grouppush, headers, lanes, order, records, util, wake
--
-- (keys.go describes every key.)
-- KEYS[1]   prioq:{Q}:dead  LIST
-- KEYS[2]   prioq:{Q}:ids   SET
-- KEYS[3]   prioq:{Q}:seq   STRING
-- KEYS[4]   prioq:{Q}:wake  ZSET
-- KEYS[5..] every lane key, lane 0 first
-- ARGV[1]   'requeue' or 'purge'
-- ARGV[2]   id to act on, or '' for every record
-- ARGV[3]   1 = lanes are lists, 2 = sorted sets
-- ARGV[4]   1 or 2 = arm the consumer wake-up (2: a shard of a queue of several)
-- Returns: how many records were handled (for one id: 1, 0 when no record
-- has it, -1 when only records that do not say their lane have it, -2 when
-- only records whose lane key holds the wrong type have it). A requeued
-- message keeps its id, starts again at 0 attempts (and without a start-by
-- header: inc/headers.lua) and goes to the tail of
-- its lane. A purged one releases its caller id. A record that does not parse,
-- or does not say which lane it came from, cannot be requeued and stays;
-- purging it (by id, or every record) deletes it. A record whose lane key
-- holds the wrong type stays too, until the key is mended.
-- Every key is checked first (lane keys: each one a record needs, by TYPE, a
-- read); in each step the record leaves the dead list (freeing memory) before
-- anything is written elsewhere. O(dead list).
local op, want, kind, arm = ARGV[1], ARGV[2], kind_of(ARGV[3]), ARGV[4] ~= NO
local nlanes = #KEYS - 4
local usable = lane_checker(5, kind)
need(KEYS[1], 'list')
need(KEYS[2], 'set')
if op == DEAD_REQUEUE then
  if kind == KIND_RANGE then need_seq(KEYS[3], redis.call('LLEN', KEYS[1])) end
  if arm then need(KEYS[4], 'zset') end
end

-- parse returns the lane, score, id, caller flag and envelope of a record
-- that can be requeued; for one that cannot, only what it can read of its id
-- (for purge). A record buried with lane '-' no longer says where it was (its
-- routing did not parse): its body may even decode, but no lane can be
-- trusted for it, so it is never requeued.
-- body_env finds the message in the body of a dead letter of unknown lane.
-- The burial kept the damaged record whole: the envelope itself, or
-- "lane|score|" and the envelope (in-flight, Levels), or "lane|score|", a
-- sequence number and the envelope (delayed; in-flight, Range). The first
-- place where an envelope plausibly starts (a known version, an id of
-- printable bytes, the attempts field) gives its id and caller flag, so that
-- purging it finds it by id and releases its caller id.
local function body_env(body)
  local p2 = routing_end(body)
  local starts = {0}
  if p2 then
    starts[2] = p2
    starts[3] = p2 + SEQ_LEN
  end
  for _, off in ipairs(starts) do
    local v = string.byte(body, off + 1)
    if v == ENV_V1 or v == ENV_V2 or v == ENV_V3 then
      local id, caller = env_id(body, off)
      if id and attempts(body, off) and not string.find(id, '[^!-~]') then return id, caller end
    end
  end
  return nil
end

local function parse(rec)
  local p2, p1 = routing_end(rec)
  local p3 = p2 and string.find(rec, '|', p2 + 1, true)
  local p4 = p3 and string.find(rec, '|', p3 + 1, true)
  local rlen = p4 and tonumber(string.sub(rec, p3 + 1, p4 - 1))
  if not rlen then return nil end
  local env = string.sub(rec, p4 + 1 + rlen)
  if string.sub(rec, 1, p1 - 1) == UNKNOWN_LANE then
    local id, caller = body_env(env)
    return nil, nil, id, caller
  end
  local id, caller = env_id(env, 0)
  local lane, score = routed(rec, nlanes, kind)
  if not lane or not id or not attempts(env, 0) then return nil, nil, id, caller end
  return lane, score, id, caller, env
end

local n, requeued, best = 0, 0, nil
local function handle(rec)
  local lane, score, id, caller, env = parse(rec)
  if op == DEAD_PURGE then
    if caller then redis.call('SREM', KEYS[2], id) end
    return
  end
  -- A requeued message starts again: no attempts, no start-by time (a
  -- late one requeued by hand runs).
  env = without_header(with_attempts(env, 0, 0), START_BY)
  local key = KEYS[5 + lane]
  if kind == KIND_RANGE then
    redis.call('ZADD', key, score, seqbytes(redis.call('INCR', KEYS[3])) .. env)
  else
    push_one(key, kind, score, env, 'RPUSH')
  end
  requeued = requeued + 1
  local p = prio_of(lane, score, kind)
  if not best or p > best then best = p end
end

if want ~= '' then
  -- One record: find it, then remove it and act.
  for start = 0, math.huge, CHUNK do
    local recs = redis.call('LRANGE', KEYS[1], start, start + CHUNK - 1)
    for _, rec in ipairs(recs) do
      local lane, score, id = parse(rec)
      if id == want then
        if op == DEAD_REQUEUE and not lane then
          n = -1 -- found, but it cannot be requeued: keep looking for one that can
        elseif op == DEAD_REQUEUE and not usable(lane, score) then
          n = -2 -- found, but its lane is broken: likewise
        else
          redis.call('LREM', KEYS[1], 1, rec)
          handle(rec)
          n = 1
          break
        end
      end
    end
    if n == 1 or #recs < CHUNK then break end
  end
else
  -- Every record, a chunk at a time from the head; those that cannot be
  -- requeued are put back at the tail, in their order, at the end.
  local kept = {}
  while true do
    local recs = redis.call('LRANGE', KEYS[1], 0, CHUNK - 1)
    if #recs == 0 then break end
    redis.call('LTRIM', KEYS[1], #recs, -1)
    for _, rec in ipairs(recs) do
      local lane, score
      if op == DEAD_REQUEUE then lane, score = parse(rec) end
      if op == DEAD_REQUEUE and not (lane and usable(lane, score)) then
        kept[#kept + 1] = rec
      else
        handle(rec)
        n = n + 1
      end
    end
  end
  if #kept > 0 then chunked('RPUSH', KEYS[1], kept) end
end
if arm and requeued > 0 then arm_wake(KEYS[4], best) end
return n
