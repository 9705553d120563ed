-- inc/index.lua: a segment index's members as priorities (KIND_LISTS).
-- index_prio is the priority that member m of a segment's index names
-- (KIND_LISTS), or nil when m names none: only what prio_str writes names a
-- list (a decimal integer within 2^53, no '+', no leading zero, no "-0").
-- Anything else ("x", "", "1e999", "007", an entry of the earlier form left
-- by a lost meta key) is passed over by readers and set aside by takes
-- (inc/take_aside.lua set_aside): "007" must not name a list prio:007 that no prioq
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
