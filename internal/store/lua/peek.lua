-- peek.lua: read up to n ready messages in serving order, taking nothing.
--
-- include: checks, each, lanes
--
-- (keys.go describes every key.)
-- KEYS[1..] lane keys, highest lane first
-- ARGV[1]   n
-- ARGV[2]   KIND_LEVELS, KIND_RANGE (members carry 8 bytes of seq) or KIND_LISTS
-- Returns: the lane entries, in the order consumers would get them.
local n, kind = tonumber(ARGV[1]), kind_of(ARGV[2])
local out = {}
-- A lane key of the wrong type is skipped, as takes skip it.
local usable = lane_checker(1, kind)
for i, key in ipairs(KEYS) do
  local want = n - #out
  if want <= 0 then break end
  if usable(i - 1) then
    lane_each(key, kind, function(e)
      out[#out + 1] = e
      return #out >= n
    end)
  end
end
return out
