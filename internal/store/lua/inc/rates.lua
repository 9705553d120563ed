-- inc/rates.lua: limits and their sliding-window logs.
-- include: util
-- limit_of reads a limit as glimits (a group's) and the rate key (the
-- queue's) keep it (limits.go): "K", a concurrency, or "K R P", that and at
-- most R takes in any window of P ms. Each is nil when absent or 0; a value
-- that does not parse is no limit at all.
local function limit_of(v)
  if type(v) ~= 'string' then return nil end
  local k, r, p = string.match(v, '^(%d+) (%d+) (%d+)$')
  if not k then k = string.match(v, '^(%d+)$') end
  k, r, p = tonumber(k or ''), tonumber(r or ''), tonumber(p or '')
  if k and k <= 0 then k = nil end
  if not (r and p and r > 0 and p > 0) then r, p = nil, nil end
  return k, r, p
end

-- Rate limits are sliding-window logs (limits.go): log is a sorted set of
-- the lease tokens of the takes of the last window, each scored with its
-- take's server time in microseconds; a take is allowed while the window of
-- per ms ending now holds fewer than the limit.
--
-- rate_window drops from log the takes older than the window ending at now
-- (µs) and returns how many it still holds; nil when log is of the wrong
-- type (no limit is kept then: nothing is held back by a broken key).
local function rate_window(log, now, per)
  local ok = redis.pcall('ZREMRANGEBYSCORE', log, '-inf', string.format('%d', now - per * 1000))
  if type(ok) ~= 'number' then return nil end
  return redis.call('ZCARD', log)
end

-- rate_due is when (µs) the next take is allowed under a limit of r per per
-- ms, with n takes in log's window and pending more of this take at now:
-- when the take that must leave the window for it does.
local function rate_due(log, n, pending, r, per, now)
  local k = n + pending - r -- 0-based, oldest first; pending ones at now
  if k < n then
    local e = redis.call('ZRANGE', log, k, k, 'WITHSCORES')
    if e[2] then return tonumber(e[2]) + per * 1000 end
  end
  return now + per * 1000
end

-- rate_log records tokens, taken at now (µs), in log, which expires per ms
-- after its newest take (an idle group's log goes by itself). pcall: past
-- the take's writes, a log of the wrong type is passed by.
local function rate_log(log, now, per, tokens)
  local args, at = {}, string.format('%d', now)
  for i, t in ipairs(tokens) do
    args[2 * i - 1] = at
    args[2 * i] = t
  end
  if #args > 0 and not pchunked('ZADD', log, args) then redis.pcall('PEXPIRE', log, per) end
end
