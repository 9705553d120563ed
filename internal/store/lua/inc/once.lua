-- inc/once.lua: a message's unique window and debounce (enqueue.lua's
-- eighth field per message, send.go onceWord).
-- include: records
--
-- The field is '' (neither), 'u <k> <ms>' (unique: KEYS[k] is the window's
-- key, prioq:{Q}:uniq:<key>, a STRING holding the server's ms when the
-- window opened; the enqueue is refused while now - that < ms) or
-- 'b <k> <ms> <l|f>' (debounce: KEYS[k], prioq:{Q}:deb:<key>, a STRING
-- holding the delayed-set member of the key's pending message; l keeps the last
-- enqueue's message, f the first's).

-- once_parse reads a field: its kind ('u', 'b' or nil), key, window (ms)
-- and mode; it raises on a field that does not parse, before any write.
local function once_parse(field)
  if field == '' then return nil end
  local kind, k, ms, mode = string.match(field, '^([ub]) (%d+) (%d+) ?([lf]?)$')
  if not kind or not KEYS[tonumber(k)] or tonumber(ms) < 1 or (kind == 'b') ~= (mode ~= '') then
    error('enqueue: bad once field ' .. field)
  end
  return kind, KEYS[tonumber(k)], tonumber(ms), mode
end

-- unique_open reports whether key's window, of ms, is open at now: a value
-- that is not a time (a damaged key) opens no window, and is overwritten.
local function unique_open(key, ms, now)
  local since = tonumber(redis.call('GET', key) or '')
  return since ~= nil and now - since < ms
end

-- unique_mark opens key's window at now; it expires by itself when the
-- window ends.
local function unique_mark(key, ms, now)
  redis.call('SET', key, now, 'PX', ms)
end

-- debounce_pending returns the id of key's pending message, its member in
-- the delayed set and its record when it still waits there, else nil. The
-- key holds the member (its sequence number and id), not the id alone: a
-- message that was promoted and is delayed again under the same id (a
-- retry) has another member, and is not pending any more.
local function debounce_pending(key, delayed, dstore)
  local member = redis.call('GET', key)
  if not member or #member <= SEQ_LEN or not redis.call('ZSCORE', delayed, member) then return nil end
  local id = string.sub(member, SEQ_LEN + 1)
  local rec = redis.call('HGET', dstore, id)
  local p2 = rec and routing_end(rec)
  if not p2 or #rec < p2 + SEQ_LEN or string.sub(rec, p2 + 1, p2 + SEQ_LEN) ~= string.sub(member, 1, SEQ_LEN) then
    return nil
  end
  return id, member, rec
end

-- DEBOUNCE_KEEP is how long a debounce key outlives its window: it must
-- name its message as long as that waits in the delayed set, which is past
-- its due time only while no promoter runs.
local DEBOUNCE_KEEP = 3600000
