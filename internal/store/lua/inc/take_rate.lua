-- inc/take_rate.lua: the queue's rate limit, for a take.
-- include: rates, take_state
--
-- take_rate checks the queue's rate limit (limits.go), when it has one: at
-- it, the take takes nothing, and take_rate returns its reply
-- (REPLY_LIMITED: in how many ms the next message may be taken); below it,
-- the take takes no more than the limit leaves, and take_rate_log adds its
-- tokens to the queue's log at the end. One GET when the queue has no
-- limit. (Before the pop: a take at the limit writes nothing but the log's
-- trim.)
local function take_rate(t)
  local _, r, per = limit_of(redis.pcall('GET', t.prefix .. Q_RATE))
  if not r or t.lease == 0 then return nil end
  local _, _, us = take_clock(t)
  local log = t.prefix .. Q_LOG
  local n = rate_window(log, us, per)
  if n and n >= r then
    local due = rate_due(log, n, 0, r, per, us)
    return take_reply(t, REPLY_LIMITED, string.format('%d', math.max(1, math.ceil((due - us) / 1000))))
  end
  if n then
    t.count = math.min(t.count, r - n)
    t.qlog, t.qper = log, per
  end
end

-- take_rate_log adds the take's tokens to the queue's rate log (pcall, in
-- rate_log: past the last write that can fail).
local function take_rate_log(t)
  if not t.qlog then return end
  local tokens, out = {}, t.out
  for k = 4, #out, 2 do tokens[#tokens + 1] = out[k] end
  rate_log(t.qlog, t.us, t.qper, tokens)
end
