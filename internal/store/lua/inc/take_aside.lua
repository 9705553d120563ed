-- inc/take_aside.lua: a segment index member that names no priority, set
-- aside by a take.
-- include: lanes, records, take_earlier, take_state
--
-- set_aside moves member m (score) of segment index key, which names no
-- priority (index_prio) and which the take has just taken out of the
-- index, to the dead letters, alone: the members beside it go on being
-- served. It is no message of this form, but it may be, or stand for, some:
-- - an entry of the earlier form (earlier_env) is a message: its record
--   keeps its segment and score, and RequeueDead puts it back as one of
--   this form;
-- - an integer written otherwise ("007", "-0", "+7") may stand for its
--   priority's list: when that list exists and no index names it
--   (named_anywhere: it would be served out of its turn), it is named here
--   ("7", score -7), so that its messages are served;
-- - a key under the name m gives (prio:007, prio:x) is none of prioq's: it
--   is left in place, and the reason names it.
-- Every other record is of no lane (never requeued; DeadLetters shows it,
-- PurgeDead deletes it). The index is reported as broken (Go logs it).
-- When the dead-letter list refuses the record (of the wrong type), m is
-- dropped if it is nothing but a wrong name; one that may be or stand for
-- data stays in its index: false is returned, and the caller passes the
-- index by (pass_by), as takes did before.
local function set_aside(t, key, m, score)
  report_broken(t, key)
  local seg, now = string.match(key, '(%d+)$'), take_clock(t)
  local env, s = earlier_env(m), tonumber(score)
  local rec, holds = nil, env ~= nil
  if env and s and s == math.floor(s) and s <= MAX_SEQ and s >= -MAX_SEQ then
    rec = dead_record(seg, string.format('%d', s), now,
      'an entry of the earlier Range form (sequence and envelope) in the index ' .. key .. ', set aside by a take', env)
  else
    local why = 'an entry that names no priority in the index ' .. key .. ', set aside by a take'
    local n = string.match(m, '^[-+]?%d+$') and tonumber(m)
    if n and n <= MAX_SEQ and n >= -MAX_SEQ then
      local c = string.format('%d', n)
      if redis.call('TYPE', plist_key(key, c)).ok == 'list' and not named_anywhere(t, c) then
        redis.call('ZADD', key, -n, c)
        why = why .. '; the list of priority ' .. c .. ' it stood for is named again'
      end
    end
    local other = plist_key(key, m)
    local ty = redis.call('TYPE', other).ok
    if ty ~= 'none' then
      why = why .. '; the key ' .. other .. ' it names (a ' .. ty .. ', none of prioq\'s) is left in place'
      holds = true
    end
    rec = dead_record(UNKNOWN_LANE, '', now, why, seg .. '|' .. score .. '|' .. m)
  end
  if type(redis.pcall('RPUSH', t.prefix .. DEAD_KEY, rec)) ~= 'number' then
    report_broken(t, t.prefix .. DEAD_KEY)
    if not holds then return true end -- nothing lost: dropped
    redis.call('ZADD', key, score, m)
    return false
  end
  return true
end
