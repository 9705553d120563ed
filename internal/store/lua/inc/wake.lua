-- inc/wake.lua: the wake-up member and the shard channel.
-- announce publishes what on the shard channel named like the wake-up key
-- (SPUBLISH, Redis >= 7.0: the channel is in the key's slot, so it is legal
-- in a script on a cluster, and only that shard's nodes carry it). It is a
-- hint: pcall, so that a server without SPUBLISH or a full output buffer
-- never fails a script after its writes; consumers that miss it find the
-- work by their periodic probe.
local function announce(wake, what)
  redis.pcall('SPUBLISH', wake, what)
end

-- tell_promoters says an earlier due time was scheduled: the sched marker
-- (a list of length <= 1; for a shard of a queue of several, sharded, a
-- sorted set whose one member is DUE, which consumers watch beside the
-- wake-up set) and the announcement on the shard channel of wake.
local function tell_promoters(sched, wake, sharded)
  if sharded then
    redis.call('ZADD', sched, 0, DUE)
  elseif redis.call('LLEN', sched) == 0 then
    redis.call('RPUSH', sched, SCHED)
  end
  announce(wake, ANNOUNCE_DUE)
end

-- arm_wake sets the wake-up set's WAKE member, its score the opposite of the
-- best priority made ready (nil: unknown, -inf), kept at the lowest score
-- (LT) until a waiting consumer pops it: a consumer of a queue of several
-- shards learns from it which priority a shard now holds, without asking.
--
-- When the member is new (no consumer had been told yet), it also announces
-- the work on the shard channel named like the key (announce): a
-- MultiConsumer (multi.go) learns of work in any of its thousands of queues
-- from one subscription per node, without a blocking connection per queue.
local function arm_wake(key, prio)
  if redis.call('ZADD', key, 'LT', prio and -prio or '-inf', WAKE) == 1 then announce(key, ANNOUNCE_READY) end
end

-- try_arm is arm_wake for a script past its first write: a wrong-typed
-- wake-up key does not raise; the ZADD's reply (an error table then) is
-- returned for the script to undo or pass over. quiet: the member is put
-- back by the take of a MultiConsumer that claimed it (take.lua MODE_CLAIM) and
-- leaves work behind: that consumer knows, and every other one was told
-- when the member was first set (or hears of it from its probe), so it
-- announces nothing: a drain would announce every take.
local function try_arm(key, prio, quiet)
  local ok = redis.pcall('ZADD', key, 'LT', prio and -prio or '-inf', WAKE)
  if ok == 1 and not quiet then announce(key, ANNOUNCE_READY) end
  return ok
end
