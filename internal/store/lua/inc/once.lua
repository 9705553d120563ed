-- inc/once.lua: a message's unique window and debounce (enqueue.lua's
-- eighth field per message, send.go onceWord).
-- include: records
--
-- The field is '' (neither), 'u <k> <ms>' (unique: KEYS[k] is the window's
-- key, prioq:{Q}:uniq:<key>, a STRING holding the server's ms when the
-- window opened; the enqueue is refused while now - that < ms) or
-- 'b <k> <ms> <l|f>' (debounce: KEYS[k], prioq:{Q}:deb:<key>, a STRING
-- holding the id of the key's pending delayed message; l keeps the last
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

-- debounce_pending returns the id of key's pending message and its member in
-- the delayed set when it still waits there (delayed), else nil.
local function debounce_pending(key, delayed, dstore)
  local id = redis.call('GET', key)
  if not id then return nil end
  local rec = redis.call('HGET', dstore, id)
  if not rec then return nil end
  local p2 = routing_end(rec)
  if not p2 or #rec < p2 + SEQ_LEN then return nil end
  local member = string.sub(rec, p2 + 1, p2 + SEQ_LEN) .. id
  if not redis.call('ZSCORE', delayed, member) then return nil end
  return id, member, rec
end
