-- inc/envelope.lua: reading and writing an envelope's fields.
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
