-- varint.lua: base-128 varints (see lib.lua for the record they build).

local function read_varint(s, pos)
  local value, mult = 0, 1
  while true do
    local b = byte(s, pos)
    pos = pos + 1
    if b < 128 then
      return value + b * mult, pos
    end
    value = value + (b - 128) * mult
    mult = mult * 128
  end
end

local function put_varint(parts, v)
  while v >= 128 do
    local low = v % 128
    parts[#parts + 1] = char(low + 128)
    v = (v - low) / 128
  end
  parts[#parts + 1] = char(v)
end

