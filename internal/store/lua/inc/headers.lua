-- inc/headers.lua: taking one header out of an envelope (envelope.go's
-- layout: version 2 has headers after the id; version 3 after the group,
-- when its flags say so; a uvarint count, then per header, sorted by key, a
-- uvarint key length, the key, a uvarint value length, the value).

-- uvarint reads the uvarint at byte i of s: its value and the byte after
-- it, or nil when it does not parse.
local function uvarint(s, i)
  local v, mult = 0, 1
  for k = 0, 9 do
    local b = string.byte(s, i + k)
    if not b then return nil end
    v = v + (b % 128) * mult
    if b < 128 then return v, i + k + 1 end
    mult = mult * 128
  end
  return nil
end

local function put_uvarint(v)
  local out = {}
  repeat
    local b = v % 128
    v = math.floor(v / 128)
    if v > 0 then b = b + 128 end
    out[#out + 1] = string.char(b)
  until v == 0
  return table.concat(out)
end

-- without_header returns envelope env without its header name: with no
-- header left, version 2 becomes version 1 and version 3 clears its flag,
-- as Encode writes such a message. An envelope without that header, or
-- whose headers do not parse, comes back unchanged.
local function without_header(env, name)
  local ver, flags, idlen = string.byte(env, 1), string.byte(env, ENV_FLAGS), string.byte(env, ENV_IDLEN)
  if not idlen then return env end
  local p = ENV_ID + idlen
  if ver == ENV_V3 then
    local g = string.byte(env, p)
    if not g or math.floor(flags / FLAG_HEADERS) % 2 ~= 1 then return env end
    p = p + 1 + g
  elseif ver ~= ENV_V2 then
    return env
  end
  local start, count = p, nil
  count, p = uvarint(env, p)
  if not count then return env end
  local kept, found = {}, false
  for _ = 1, count do
    local kl, vl, k, v
    kl, p = uvarint(env, p)
    if not kl then return env end
    k, p = string.sub(env, p, p + kl - 1), p + kl
    vl, p = uvarint(env, p)
    if not vl or #k ~= kl then return env end
    v, p = string.sub(env, p, p + vl - 1), p + vl
    if #v ~= vl then return env end
    if k == name then found = true else kept[#kept + 1] = put_uvarint(kl) .. k .. put_uvarint(vl) .. v end
  end
  if not found then return env end
  local head, payload = string.sub(env, 1, start - 1), string.sub(env, p)
  if #kept > 0 then return head .. put_uvarint(#kept) .. table.concat(kept) .. payload end
  if ver == ENV_V2 then return string.char(ENV_V1) .. string.sub(head, 2) .. payload end
  return string.sub(head, 1, ENV_FLAGS - 1) .. string.char(flags - FLAG_HEADERS) .. string.sub(head, ENV_FLAGS + 1) .. payload
end
