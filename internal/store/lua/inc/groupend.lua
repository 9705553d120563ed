-- inc/groupend.lua: the end of a group's lease.
-- include: envelope, lanes, park
-- rate_parked reports whether group g of the queue of lane key `lane` waits
-- for a time in gdue (parked at its rate limit, take.lua): a lease ending
-- then does not put it back (a promoter does, when the time comes; before
-- it, its next take would only park it again).
local function rate_parked(lane, g)
  return type(redis.pcall('ZSCORE', queue_key(lane, G_DUE), g)) == 'string'
end

-- group_ended ends lease token of a message of group g, of the queue of
-- lane key `lane`: the token leaves the group's leases (a set: removing it
-- twice, as an ack racing the sweep of its expired lease would, counts
-- once), which may bring the group back from its concurrency limit
-- (group_unpark, whose report it returns), unless it waits for its rate.
local function group_ended(lane, kind, g, token)
  redis.pcall('SREM', queue_key(lane, G_LEASES .. g), token)
  if rate_parked(lane, g) then return false end
  return group_unpark(lane, kind, g)
end

-- group_done counts the end of a lease on envelope env of lane key `lane`
-- (an ack, a retry, a dead letter, an expired or given-back lease): one
-- fewer of its group in flight, which may bring the group back from its
-- concurrency limit (group_unpark). Nothing for a message without a group.
-- Reports whether markers went back (the caller wakes a consumer).
local function group_done(lane, kind, env, token)
  local g = kind ~= KIND_RANGE and env_group(env)
  if not g then return false end
  return group_ended(lane, kind, g, token)
end
