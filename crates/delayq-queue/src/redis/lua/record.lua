-- record.lua: decoding and encoding the job record (layout in lib.lua). Needs varint.lua.

local function decode(rec)
  local b = byte(rec, 1)
  local h = { prio = b % 8, state = floor(b / 8) % 4, flags = floor(b / 32) }
  local pos, v = 2, 0
  h.topic, pos = read_varint(rec, pos)
  h.attempt, pos = read_varint(rec, pos)
  h.max_retries, pos = read_varint(rec, pos)
  h.create, pos = read_varint(rec, pos)
  v, pos = read_varint(rec, pos)
  h.run_at = h.create + (v % 2 == 0 and v / 2 or -(v + 1) / 2)
  v, pos = read_varint(rec, pos)
  h.updated = h.create + (v % 2 == 0 and v / 2 or -(v + 1) / 2)
  h.ttr, pos = read_varint(rec, pos)
  h.ttl, pos = read_varint(rec, pos)
  v, pos = read_varint(rec, pos)
  h.delay = (h.run_at - h.create) + (v % 2 == 0 and v / 2 or -(v + 1) / 2)
  h.tail = sub(rec, pos)
  return h
end

-- Zigzag: signed to unsigned, as Rust's codec does.
local function zig(v)
  if v >= 0 then
    return v * 2
  end
  return -v * 2 - 1
end

local function encode(h)
  local parts = { char(h.flags * 32 + h.state * 8 + h.prio) }
  put_varint(parts, h.topic)
  put_varint(parts, h.attempt)
  put_varint(parts, h.max_retries)
  put_varint(parts, h.create)
  put_varint(parts, zig(h.run_at - h.create))
  put_varint(parts, zig(h.updated - h.create))
  put_varint(parts, h.ttr)
  put_varint(parts, h.ttl)
  put_varint(parts, zig(h.delay - (h.run_at - h.create)))
  parts[#parts + 1] = h.tail
  return table.concat(parts)
end

