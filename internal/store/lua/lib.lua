-- lib.lua: constants and helpers every script shares. lua.go puts this
-- file in front of each script, so each stays one self-contained EVAL.
--
-- The rule every script follows: no script can fail after its first write,
-- because Redis does not roll a script back. So each script first reads and
-- checks everything (key types with need(), record formats, counter values),
-- then writes with commands that cannot fail: types known, argument lists cut
-- into CHUNK-sized calls (Lua's unpack stops near 8,000 values), and, at
-- maxmemory, the first write one that frees memory (ZREM, HDEL, LPOP, LREM,
-- DEL): Redis refuses a script only at its first write that may grow memory,
-- before anything was written.

-- The envelope's positions (ENV_*), SEQ_LEN, CHUNK, the argument values
-- (KIND_LEVELS, KIND_RANGE, YES) and the member and operation names (WAKE,
-- PAUSE, FAIL_*, DEAD_*) are defined by protocol.go, in front of this file.
local MAX_SEQ = 9007199254740992 -- 2^53: the seq counter stays exact in Lua
-- FILLED: the queue's lanes are named in its filled index (kind_of sets it).
local FILLED = false
-- NLANES: how many lanes the queue has; every script that may put a group's
-- parked markers back sets it (park_entry checks the lanes entries name).
-- BURIED counts the parked entries such a script set aside (group_unpark).
local NLANES, BURIED = nil, 0

-- need raises WRONGTYPE, before any write, when key holds a type other than
-- want ('none' is always fine: the script creates it).
local function need(key, want)
  local got = redis.call('TYPE', key).ok
  if got ~= 'none' and got ~= want then
    error({err = 'WRONGTYPE prioq: ' .. key .. ' is a ' .. got .. ', want a ' .. want})
  end
end

-- announce publishes what on the shard channel named like the wake-up key
-- (SPUBLISH, Redis >= 7.0: the channel is in the key's slot, so it is legal
-- in a script on a cluster, and only that shard's nodes carry it). It is a
-- hint: pcall, so that a server without SPUBLISH or a full output buffer
-- never fails a script after its writes; consumers that miss it find the
-- work by their periodic probe.
local function announce(wake, what)
  redis.pcall('SPUBLISH', wake, what)
end

-- kind_of reads a script's kind argument: KIND_LEVELS, KIND_RANGE or
-- KIND_LISTS. KIND_FILLED and KIND_LISTS_FILLED are read as KIND_LEVELS and
-- KIND_LISTS and set FILLED, which makes push_one, by_lane and take.lua name
-- each lane they push to in the filled index (keys.go): a take of a queue of
-- many lanes reads there the best lane holding messages instead of looking
-- at every lane.
local function kind_of(arg)
  local k = tonumber(arg)
  if k == KIND_FILLED then
    FILLED = true
    return KIND_LEVELS
  elseif k == KIND_LISTS_FILLED then
    FILLED = true
    return KIND_LISTS
  end
  return k
end

-- queue_key is the key `name` of the queue (or shard) of lane key `lane`:
-- its sibling (keys.go), in the same hash tag, so the same slot (the filled
-- index, the group keys).
local function queue_key(lane, name)
  return string.match(lane, '^(.*)lane:%d+$') .. name
end

-- count_add adds n to field of hash key, and drops the field when it falls
-- to 0 or below (the group counts, groups.go). pcall: a key of the wrong
-- type is passed by (counts are for Stats; no script fails for them).
local function count_add(key, field, n)
  local v = redis.pcall('HINCRBY', key, field, n)
  if type(v) == 'number' and v <= 0 then redis.pcall('HDEL', key, field) end
end
-- name_lane names lane key `lane` in its filled index after a push into it
-- (FILLED only): member N, score -N, so that the index's first member is the
-- best lane. pcall: an index of the wrong type is not this push's failure
-- (no script may fail after its first write); takes then pass the index by
-- and pop over every lane (take.lua). The name may outlive the lane's
-- messages (takes that pop without the index leave it): takes drop it.
local function name_lane(lane)
  if not FILLED then return end
  local n = string.match(lane, '(%d+)$')
  redis.pcall('ZADD', queue_key(lane, FILLED_KEY), '-' .. n, n)
end

-- lane_type is the Redis type of a lane key: a LIST for Levels, a ZSET for
-- Range (the messages themselves, KIND_RANGE, or the index of the
-- priorities waiting, KIND_LISTS).
local function lane_type(kind)
  if kind == KIND_LEVELS then return 'list' end
  return 'zset'
end

-- plist_key is the key of the list of priority prio (a string as prio_str
-- writes it) of the Range segment whose index is lane key `lane`
-- (KIND_LISTS): the lane key's prefix, PRIO_LIST and the priority
-- (keys.go). Built here because a take learns the priority from the index
-- only as it pops it; the key is in the lane key's hash tag, so its slot.
local function plist_key(lane, prio)
  return string.match(lane, '^(.*)lane:%d+$') .. PRIO_LIST .. prio
end

-- prio_str is the priority of a segment score (its opposite) as a decimal
-- integer, the member of that priority in a segment's index (KIND_LISTS).
-- Scores are checked integers within 2^53 (routed), so %d is exact.
local function prio_str(score)
  return string.format('%d', -tonumber(score))
end

-- index_prio is the priority that member m of a segment's index names
-- (KIND_LISTS), or nil when m names none: only what prio_str writes names a
-- list (a decimal integer within 2^53, no '+', no leading zero, no "-0").
-- Anything else ("x", "", "1e999", "007", an entry of the earlier form left
-- by a lost meta key) is passed over by readers and set aside by takes
-- (take.lua set_aside): "007" must not name a list prio:007 that no prioq
-- ever writes, nor stand for prio:7, whose own member is "7".
local function index_prio(m)
  if #m > 17 or not string.match(m, '^-?%d+$') then return nil end
  local n = tonumber(m)
  if n > MAX_SEQ or n < -MAX_SEQ or string.format('%d', n) ~= m then return nil end
  return n
end

-- index_head is the best priority that segment index `key` names (its first
-- member that names one, index_prio), or nil when it names none or is of the
-- wrong type. Reads only: members that name no priority are passed over.
-- (The first read is of one member: what a healthy index needs.)
local function index_head(key)
  local start, n = 0, 1
  while true do
    local got = redis.pcall('ZRANGE', key, start, start + n - 1)
    if type(got) ~= 'table' or got.err then return nil end
    for _, m in ipairs(got) do
      local p = index_prio(m)
      if p then return p end
    end
    if #got < n then return nil end
    start, n = start + n, 16
  end
end

-- need_lane checks, before a write, that lane key `key` and, for
-- KIND_LISTS, the list of score's priority can take a push (need: missing
-- or of the lane's type), each key once per script (checked: the keys seen).
local function need_lane(checked, key, kind, score)
  if not checked[key] then
    need(key, lane_type(kind))
    checked[key] = true
  end
  if kind == KIND_LISTS then
    local list = plist_key(key, prio_str(score))
    if not checked[list] then
      need(list, 'list')
      checked[list] = true
    end
  end
end

-- need_seq checks the FIFO counter can be incremented n times more.
local function need_seq(key, n)
  local v = redis.call('GET', key) -- WRONGTYPE for a non-string
  -- INCR takes no leading zero (nor "+" or spaces): only what it takes passes.
  if v and not ((v == '0' or string.match(v, '^[1-9]%d*$')) and tonumber(v) + n < MAX_SEQ) then
    error({err = 'ERR prioq: ' .. key .. ' does not hold a usable counter'})
  end
end

-- chunked runs `cmd key v1 v2 ...` in calls of at most CHUNK values (CHUNK
-- is even, so score/member pairs stay together).
local function chunked(cmd, key, vals)
  for i = 1, #vals, CHUNK do
    redis.call(cmd, key, unpack(vals, i, math.min(i + CHUNK - 1, #vals)))
  end
end

-- pchunked is chunked with redis.pcall: it stops at the first chunk that
-- fails and returns that error (a table with err), or nil.
local function pchunked(cmd, key, vals)
  for i = 1, #vals, CHUNK do
    local ok = redis.pcall(cmd, key, unpack(vals, i, math.min(i + CHUNK - 1, #vals)))
    if type(ok) == 'table' and ok.err then return ok end
  end
end

-- hmget reads any number of fields; missing ones come back false.
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, CHUNK do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

-- seqbytes is n as 8 bytes big-endian: members of equal score sort bytewise,
-- so a sequence in front keeps them first in, first out.
local function seqbytes(n)
  local b = {}
  for i = 8, 1, -1 do
    b[i] = n % 256
    n = math.floor(n / 256)
  end
  return string.char(unpack(b))
end

-- attempts reads the attempts field of the envelope starting after `off`
-- bytes of s; nil when s is too short to hold it.
local function attempts(s, off)
  local a1, a2, a3, a4 = string.byte(s, off + ENV_ATTEMPTS, off + ENV_ATTEMPTS + 3)
  if not a4 then return nil end
  return ((a1 * 256 + a2) * 256 + a3) * 256 + a4
end

-- with_attempts returns s with the attempts field set to a.
local function with_attempts(s, off, a)
  local b4 = a % 256; a = math.floor(a / 256)
  local b3 = a % 256; a = math.floor(a / 256)
  local b2 = a % 256; a = math.floor(a / 256)
  return string.sub(s, 1, off + ENV_ATTEMPTS - 1) .. string.char(a % 256, b2, b3, b4) ..
    string.sub(s, off + ENV_ATTEMPTS + 4)
end

-- env_id reads the id of the envelope starting after `off` bytes of s, and
-- whether the producer gave it; nil when s cannot hold one.
local function env_id(s, off)
  local n = string.byte(s, off + ENV_IDLEN)
  if not n or n == 0 or #s < off + ENV_ID + n - 1 then return nil end
  local caller = math.floor(string.byte(s, off + ENV_FLAGS) / FLAG_CALLER_ID) % 2 == 1
  return string.sub(s, off + ENV_ID, off + ENV_ID + n - 1), caller
end

-- routing_end returns where "lane|score|" ends in s (the second '|', and
-- the first), without checking either field; nil without two '|'.
local function routing_end(s)
  local p1 = string.find(s, '|', 1, true)
  local p2 = p1 and string.find(s, '|', p1 + 1, true)
  return p2, p1
end

-- routed parses "lane|score|rest" (the form of dstore and inflight values and
-- of dead-letter records) and checks the lane is one of nlanes and, for a
-- range, that the score is an integer ZADD takes (digits alone are not
-- enough: 400 of them overflow a double, and ZADD would fail after the
-- script's first write); nil when malformed.
local function routed(rec, nlanes, kind)
  if type(rec) ~= 'string' then return nil end
  local p2, p1 = routing_end(rec)
  if not p2 then return nil end
  local lane = tonumber(string.sub(rec, 1, p1 - 1))
  local score = string.sub(rec, p1 + 1, p2 - 1)
  if not lane or lane ~= math.floor(lane) or lane < 0 or lane >= nlanes then return nil end
  if kind ~= KIND_LEVELS then
    local n = string.match(score, '^-?%d+$') and tonumber(score)
    if not n or n > MAX_SEQ or n < -MAX_SEQ then return nil end
  end
  return lane, score, string.sub(rec, p2 + 1)
end

-- dead_record is a dead-letter record: "lane|score|diedMs|reasonLen|" then
-- the reason and the stored body (dead.go parseDead reads it). A record
-- that no longer says where it was gets UNKNOWN_LANE and an empty score, so
-- that dead.lua never requeues it into a lane it did not come from. (Before
-- this, such records said lane 0, which a Levels queue cannot tell apart.)
local function dead_record(lane, score, now, why, body)
  return lane .. '|' .. score .. '|' .. now .. '|' .. #why .. '|' .. why .. body
end

-- now_ms is the Redis server's clock in milliseconds: floored, to ask "has
-- this deadline passed?", and ceiled, to compute a deadline, so that nothing
-- is early by a fraction of a millisecond. Every deadline comes from here, not
-- from a host: a host with a wrong clock cannot expire another consumer's
-- lease or promote early. (Redis 7 replicates a script's effects, not the
-- script, so reading TIME is safe on replicas and in Cluster.)
local function now_ms()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), math.ceil(us / 1000), us
end

-- delayed_member is the delayed set's member for a message: its sequence
-- number in front of its id, so that messages due in the same millisecond are
-- promoted in the order they were scheduled, whatever their ids.
local function delayed_member(seq, id) return seqbytes(seq) .. id end
local function delayed_id(member) return string.sub(member, SEQ_LEN + 1) end

-- unschedule removes the delayed set's member of id, whose dstore record is
-- rec, and returns how many members it removed. The member is read from the
-- record (its sequence number follows "lane|score|"); when the record is too
-- damaged to say (or says wrong), the set is searched, O(delayed), so that no
-- member outlives its record: a member left behind would promote the next
-- message stored under the same id at the old due time.
local function unschedule(delayed, rec, id)
  local p2 = routing_end(rec)
  if p2 and #rec >= p2 + SEQ_LEN then
    local n = redis.call('ZREM', delayed, string.sub(rec, p2 + 1, p2 + SEQ_LEN) .. id)
    if n > 0 then return n end
  end
  local gone = {}
  for start = 0, math.huge, CHUNK do
    local members = redis.call('ZRANGE', delayed, start, start + CHUNK - 1)
    for _, m in ipairs(members) do
      if delayed_id(m) == id then gone[#gone + 1] = m end
    end
    if #members < CHUNK then break end
  end
  chunked('ZREM', delayed, gone)
  return #gone
end

-- each_in calls fn(entry, key) for the entries of list or sorted set key in
-- order, a CHUNK at a time, until fn returns true; it reports whether fn
-- stopped it.
local function each_in(key, cmd, fn)
  for start = 0, math.huge, CHUNK do
    local items = redis.call(cmd, key, start, start + CHUNK - 1)
    for _, e in ipairs(items) do
      if fn(e, key) then return true end
    end
    if #items < CHUNK then return false end
  end
end

-- marker_group is the group whose marker e is (G_MARK and a valid group
-- key, groups.go validateGroup), or nil: an entry that only starts like a
-- marker (garbage written by hand) is passed on as an entry, and buried
-- as one that does not decode.
local function marker_group(e)
  if string.sub(e, 1, 1) ~= G_MARK or #e > 129 then return nil end
  return string.match(e, '^.([!-~]+)$')
end

-- lane_each calls fn(entry, key, group, list) for each message of a lane in
-- serving order until fn returns true, key being the key that holds the
-- entry (the lane, or for KIND_LISTS the priority's list, or a group's list:
-- then group is the group and list the list its marker is in), and reports
-- whether fn stopped it. A priority list of the wrong type is passed
-- by, and so is an index member that names no priority (index_prio), alone.
-- Messages of a group parked at its limit are not in the lane (see
-- group_parked).
local function lane_each(lane, kind, fn)
  if kind == KIND_RANGE then return each_in(lane, 'ZRANGE', fn) end
  -- A group's marker stands for its group's list (group_push), whose
  -- messages are the group's at that place: key is then the group's list.
  local function entry(e, key)
    local g = marker_group(e)
    if g then
      local glist = key .. G_LIST .. g
      return redis.call('TYPE', glist).ok == 'list' and each_in(glist, 'LRANGE', function(m, gl)
        return fn(m, gl, g, key)
      end)
    end
    return fn(e, key)
  end
  if kind == KIND_LEVELS then return each_in(lane, 'LRANGE', entry) end
  return each_in(lane, 'ZRANGE', function(prio)
    if not index_prio(prio) then return false end
    local key = plist_key(lane, prio)
    return redis.call('TYPE', key).ok == 'list' and each_in(key, 'LRANGE', entry)
  end)
end

-- need_delayed checks the keys schedule writes: the delayed set, the store
-- of delayed records, the sched marker (a list; for a shard of a queue of
-- several, sharded, a sorted set).
local function need_delayed(delayed, dstore, sched, sharded)
  need(delayed, 'zset')
  need(dstore, 'hash')
  if sharded then need(sched, 'zset') else need(sched, 'list') end
end

-- schedule stores a delayed message (its member in the delayed set, its
-- record "lane|score|" seq‖envelope in dstore) and wakes a promoter when it
-- comes due before the set's head did: the promoters sleep until the head's
-- due time. The sched marker is a list of length ≤ 1, so it stays bounded;
-- for a shard of a queue of several (sharded) it is a sorted set whose one
-- member is DUE, which a consumer's one blocking wait per shard watches
-- beside the wake-up set when that consumer promotes.
-- earliest is the head's due time as last seen (nil: read it here); schedule
-- returns it as it is now, for the next message of a batch.
local function schedule(delayed, dstore, sched, due, seq, id, lane, score, env, earliest, sharded)
  if earliest == nil then
    local head = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    earliest = head[2] and tonumber(head[2]) or math.huge
  end
  redis.call('ZADD', delayed, due, delayed_member(seq, id))
  redis.call('HSET', dstore, id, lane .. '|' .. score .. '|' .. seqbytes(seq) .. env)
  if due < earliest then
    earliest = due
    if sharded then
      redis.call('ZADD', sched, 0, DUE)
    elseif redis.call('LLEN', sched) == 0 then
      redis.call('RPUSH', sched, SCHED)
    end
    -- The wake-up key is the sched key's sibling (keys.go): same prefix.
    announce(string.sub(sched, 1, #sched - #'sched') .. 'wake', ANNOUNCE_DUE)
  end
  return earliest
end

-- lane_checker returns usable(lane, score): whether KEYS[base + lane]
-- can take the layout's lane writes (it is missing or of the lane type) and,
-- for KIND_LISTS, whether the list of score's priority can, each key asked
-- once; and the reason to bury a message when it cannot: a key of the
-- wrong type (a hand edit, a bug) must not stop the other lanes.
local function lane_checker(base, kind)
  local seen = {}
  local function check(key, want)
    local why = seen[key]
    if why == nil then
      local got = redis.call('TYPE', key).ok
      why = false
      if got ~= 'none' and got ~= want then why = 'lane ' .. key .. ' is a ' .. got .. ', not a ' .. want end
      seen[key] = why
    end
    return why
  end
  return function(lane, score)
    local key = KEYS[base + lane]
    local why = check(key, lane_type(kind))
    if not why and kind == KIND_LISTS and score then why = check(plist_key(key, prio_str(score)), 'list') end
    return not why, why or nil
  end
end

-- push_entry writes one entry into lane key `key` with score: RPUSH or
-- LPUSH (listcmd) into a level's list (named in the filled index, when
-- FILLED) or a priority's list (KIND_LISTS, whose index then names the
-- priority), or ZADD of member (seq‖envelope) into a segment (KIND_RANGE).
-- The keys' types are the caller's to check. push_one is what writers call:
-- it sends a message of a group to its group's list instead.
local function push_entry(key, kind, score, value, listcmd)
  if kind == KIND_LEVELS then
    redis.call(listcmd, key, value)
    name_lane(key)
  elseif kind == KIND_RANGE then
    redis.call('ZADD', key, score, value)
  else
    local prio = prio_str(score)
    redis.call(listcmd, plist_key(key, prio), value)
    redis.call('ZADD', key, score, prio)
    name_lane(key)
  end
end

-- env_group is the group of envelope s (version 3: after the id, its length
-- and the group), or nil for none; lane entries of KIND_RANGE are not
-- envelopes (groups need lists).
local function env_group(s)
  if string.byte(s, 1) ~= ENV_V3 then return nil end
  local n = string.byte(s, ENV_IDLEN)
  local g = n and string.byte(s, ENV_ID + n)
  if not g or g == 0 or #s < ENV_ID + n + g then return nil end
  return string.sub(s, ENV_ID + n + 1, ENV_ID + n + g)
end

-- marker_list is the list a lane write of score goes to: the level's lane
-- itself, or the list of the score's priority (KIND_LISTS). A group's
-- marker is in it, and the group's list is named after it.
local function marker_list(lane, kind, score)
  if kind == KIND_LISTS then return plist_key(lane, prio_str(score)) end
  return lane
end

-- group_push writes envelope value of group g (groups.go): to the tail or
-- the head (listcmd) of the group's list beside marker_list, counted in the
-- ready counts; when that list was empty, the group's marker goes into the
-- lane as a message would (push_entry): one marker per group and list,
-- which takes serve in turn with the lane's other entries. A group's list
-- of the wrong type (a hand edit) is passed by: the message goes into the
-- lane itself, served in its turn without the group's rotation, so that it
-- is never lost. Reports whether a marker (or the message) went into the lane.
--
-- At the head (LPUSH: a message whose lease expired or was given back, see
-- sweep.lua and release.lua) the group's marker goes to the head of its
-- list too, from wherever it is in it, so that the message is served
-- before the newer ones of its priority, as messages without a group are,
-- not at its group's next turn behind them. A take put the marker at the
-- tail, so LREM looks from there. (A parked marker is put back by the lease
-- end before this, which then moves it.)
local function group_push(lane, kind, score, value, listcmd, g)
  local n = redis.pcall(listcmd, marker_list(lane, kind, score) .. G_LIST .. g, value)
  if type(n) ~= 'number' then
    push_entry(lane, kind, score, value, listcmd)
    return true
  end
  local ready = queue_key(lane, G_READY)
  count_add(ready, g, 1)
  if n == 1 then
    push_entry(lane, kind, score, G_MARK .. g, listcmd)
    count_add(ready, '', 1) -- markers in lanes (Stats)
    return true
  end
  if listcmd == 'LPUSH' then
    local list, mark = marker_list(lane, kind, score), G_MARK .. g
    if redis.call('LINDEX', list, 0) ~= mark and redis.call('LREM', list, -1, mark) > 0 then
      redis.call('LPUSH', list, mark)
    end
  end
  return false
end

-- push_one writes one message into lane key `key` with score (push_entry),
-- or, when it belongs to a group, into its group's list (group_push).
local function push_one(key, kind, score, value, listcmd)
  local g = kind ~= KIND_RANGE and env_group(value)
  if g then
    group_push(key, kind, score, value, listcmd, g)
  else
    push_entry(key, kind, score, value, listcmd)
  end
end

-- key_is reports whether key is missing or of Redis type want.
local function key_is(key, want)
  local t = redis.call('TYPE', key).ok
  return t == 'none' or t == want
end

-- park_entry reads an entry of a group's parked markers (G_PARK, written
-- by take.lua: "N|score"): the lane N, one of the queue's NLANES, and for
-- KIND_LISTS the score of the priority whose list the marker came from (an
-- integer within 2^53, as routed checks; Levels: none, nil). nil for an
-- entry that says anything else (a hand edit, a bug): pushing its marker
-- would put it where no take looks, or fail the script past its writes.
local function park_entry(entry, kind)
  local n, score = string.match(entry, '^(%d+)|(.*)$')
  n = tonumber(n or '')
  if not n or not NLANES or n >= NLANES then return nil end
  if kind ~= KIND_LISTS then
    if score ~= '' then return nil end
    return n, nil
  end
  local v = string.match(score, '^-?%d+$') and tonumber(score)
  if not v or v > MAX_SEQ or v < -MAX_SEQ then return nil end
  return n, score
end

-- group_unpark puts back the markers of group g parked at its limit
-- (groups.go): each into the lane it came from, at the tail, so that the
-- group waits its turn again. An entry whose lane refuses the push (a key
-- of the wrong type) stays parked. An entry that does not parse
-- (park_entry) is set aside in the dead letters, whole, with the reason
-- (and counted in BURIED, and in the server's log), so that the others go
-- on; with a dead list of the wrong type it stays where it is, unused.
-- Everything is read first, and the first write removes the group's
-- entries (HDEL, freeing memory): at maxmemory Redis refuses only a
-- script's first write that may grow memory, so a full Redis still puts
-- markers back (they replace the entries). Reports whether any went back.
local function group_unpark(lane, kind, g)
  local park = queue_key(lane, G_PARK)
  local parked = redis.pcall('HGET', park, g)
  if type(parked) ~= 'string' then return false end
  local push, kept, bad = {}, {}, {}
  for entry in string.gmatch(parked, '[^ ]+') do
    local n, score = park_entry(entry, kind)
    local key = n and queue_key(lane, 'lane:' .. n)
    if not n then
      bad[#bad + 1] = entry
    elseif key_is(key, lane_type(kind)) and (kind ~= KIND_LISTS or key_is(plist_key(key, prio_str(score)), 'list')) then
      -- (push_entry writes a priority's list before its index: both
      -- checked, it cannot fail half-way.)
      push[#push + 1] = {key, score}
    else
      kept[#kept + 1] = entry
    end
  end
  local dead = queue_key(lane, DEAD_KEY)
  if #bad > 0 and not key_is(dead, 'list') then
    for _, e in ipairs(bad) do kept[#kept + 1] = e end
    bad = {}
  end
  redis.call('HDEL', park, g)
  for _, p in ipairs(push) do push_entry(p[1], kind, p[2], G_MARK .. g, 'RPUSH') end
  if #kept > 0 then redis.call('HSET', park, g, table.concat(kept, ' ')) end
  if #bad > 0 then
    local now, why = now_ms(), 'corrupt parked entry of group ' .. g
    for _, e in ipairs(bad) do redis.call('RPUSH', dead, dead_record(UNKNOWN_LANE, '', now, why, e)) end
    BURIED = BURIED + #bad
    redis.log(redis.LOG_WARNING, 'prioq: ' .. why .. ' in ' .. park .. ' moved to the dead letters: ' .. table.concat(bad, ' '))
  end
  if #push > 0 then count_add(queue_key(lane, G_READY), '', #push) end
  return #push > 0
end

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

-- group_due sets the time (ms) group g, parked at its rate limit, comes back
-- (the queue's gdue, prefix its keys' prefix): a promoter puts its markers
-- back then (promote.lua). When that is before every due time the promoters
-- sleep for (the delayed set's head, gdue's), it wakes them as schedule
-- does. pcall: past the take's writes; a group left without a time (gdue of
-- the wrong type) is put back by the sweep's repair.
local function group_due(prefix, g, due, sharded)
  local gdue, earliest = prefix .. G_DUE, math.huge
  for _, key in ipairs({prefix .. 'delayed', gdue}) do
    local head = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
    if type(head) == 'table' and head[2] then earliest = math.min(earliest, tonumber(head[2])) end
  end
  if type(redis.pcall('ZADD', gdue, due, g)) ~= 'number' or due >= earliest then return end
  local sched = prefix .. 'sched'
  if sharded then
    redis.pcall('ZADD', sched, 0, DUE)
  elseif redis.pcall('LLEN', sched) == 0 then
    redis.pcall('RPUSH', sched, SCHED)
  end
  announce(prefix .. 'wake', ANNOUNCE_DUE)
end

-- by_lane collects {score, value} pairs per lane in the order they come, for
-- lanes whose type the caller checked (usable(), or need()). It returns
-- add(lane, score, value) and flush(listcmd, seq), which writes them, lane by
-- lane in the order first seen, one command per lane (per CHUNK): the values
-- with listcmd (RPUSH at the tail, LPUSH at the head) into lists; the pairs
-- as they are into sorted sets, or, given seq, with fresh sequence numbers
-- seq+1, seq+2, ... in front of the values. flush reports whether a lane
-- went from empty to holding something (always, for sorted sets), the moment
-- idle consumers may be waiting for it.
local function by_lane(base, kind)
  local order, lists, lanes = {}, {}, {}
  local function add(lane, score, value)
    -- KIND_LISTS: one group per priority list, each with its own lane.
    local g = lane
    if kind == KIND_LISTS then g = lane .. '|' .. prio_str(score) end
    local l = lists[g]
    if not l then
      l = {}
      lists[g] = l
      lanes[g] = lane
      order[#order + 1] = g
    end
    l[#l + 1] = score
    l[#l + 1] = value
    -- A message of a group goes to its group's list, in its place among
    -- the others of its lane (flush keeps their order).
    local grp = kind ~= KIND_RANGE and env_group(value)
    if grp then
      l.groups = l.groups or {}
      l.groups[#l / 2] = grp
    end
  end
  -- push_run writes vals, values without a group, into lane key key (and
  -- for KIND_LISTS the list of priority prio) with listcmd; reports whether
  -- a level went from empty to holding something.
  local function push_run(key, prio, score, vals, listcmd)
    if #vals == 0 then return false end
    if kind == KIND_LISTS then
      chunked(listcmd, plist_key(key, prio), vals)
      redis.call('ZADD', key, score, prio)
      name_lane(key)
      return true
    end
    local woke = false
    for i = 1, #vals, CHUNK do
      local last = math.min(i + CHUNK - 1, #vals)
      local len = redis.call(listcmd, key, unpack(vals, i, last))
      if i == 1 and len == last then woke = true end
    end
    name_lane(key)
    return woke
  end
  local function flush(listcmd, seq)
    local woke = false
    for _, g in ipairs(order) do
      local l, key = lists[g], KEYS[base + lanes[g]]
      local vals = {}
      if kind ~= KIND_RANGE then
        local prio = kind == KIND_LISTS and prio_str(l[1]) or nil
        for j = 2, #l, 2 do
          local grp = l.groups and l.groups[j / 2]
          if grp then
            if push_run(key, prio, l[1], vals, listcmd) then woke = true end
            vals = {}
            if group_push(key, kind, l[j - 1], l[j], listcmd, grp) then woke = true end
          else
            vals[#vals + 1] = l[j]
          end
        end
        if push_run(key, prio, l[1], vals, listcmd) then woke = true end
      elseif seq then
        for j = 1, #l, 2 do
          seq = seq + 1
          vals[#vals + 1] = l[j]
          vals[#vals + 1] = seqbytes(seq) .. l[j + 1]
        end
        chunked('ZADD', key, vals)
        woke = true
      else
        chunked('ZADD', key, l)
        woke = true
      end
    end
    return woke
  end
  return add, flush
end

-- taken_before reports whether the lease token a was taken before b: a
-- token starts with the take's server time (13 hex digits of microseconds)
-- and the message's place in the take (4 hex digits); see take.lua. (Tokens
-- of earlier versions, random there, sort anyhow.)
local function taken_before(a, b)
  local ta, tb = tonumber(string.sub(a, 1, 13), 16) or 0, tonumber(string.sub(b, 1, 13), 16) or 0
  if ta ~= tb then return ta < tb end
  return (tonumber(string.sub(a, 14, 17), 16) or 0) < (tonumber(string.sub(b, 14, 17), 16) or 0)
end

-- prio_of is the priority of a message of lane with score: the lane itself
-- for Levels, the score's opposite for Range.
local function prio_of(lane, score, kind)
  if kind ~= KIND_LEVELS then return -tonumber(score) end
  return tonumber(lane)
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
-- back by the take of a MultiConsumer that claimed it (take.lua ARGV[8]) and
-- leaves work behind: that consumer knows, and every other one was told
-- when the member was first set (or hears of it from its probe), so it
-- announces nothing: a drain would announce every take.
local function try_arm(key, prio, quiet)
  local ok = redis.pcall('ZADD', key, 'LT', prio and -prio or '-inf', WAKE)
  if ok == 1 and not quiet then announce(key, ANNOUNCE_READY) end
  return ok
end

-- The script itself follows.
