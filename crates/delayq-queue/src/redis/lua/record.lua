-- record.lua: decoding and encoding the job record (layout in lib.lua). Needs varint.lua.

-- The state and the topic code of a record, without decoding the rest.
local function peek(rec)
  return floor(byte(rec, 1) / 8) % 4, (read_varint(rec, 2))
end

-- The attempt of a record, read without decoding the rest.
local function attempt_of(rec)
  local _, pos = read_varint(rec, 2)
  return (read_varint(rec, pos))
end

local function decode(rec)
  local b = byte(rec, 1)
  -- Every field in the constructor: the table is sized once, not grown field by field.
  local h = {
    prio = b % 8, state = floor(b / 8) % 4, flags = floor(b / 32), topic = 0, attempt = 0,
    max_retries = 0, create = 0, run_at = 0, updated = 0, ttr = 0, ttl = 0, delay = 0,
    tail = '', updated_from = 0, updated_to = 0,
  }
  local pos, v = 2, 0
  h.topic, pos = read_varint(rec, pos)
  h.attempt, pos = read_varint(rec, pos)
  h.max_retries, pos = read_varint(rec, pos)
  h.create, pos = read_varint(rec, pos)
  v, pos = read_varint(rec, pos)
  h.run_at = h.create + (v % 2 == 0 and v / 2 or -(v + 1) / 2)
  h.updated_from = pos
  v, pos = read_varint(rec, pos)
  h.updated = h.create + (v % 2 == 0 and v / 2 or -(v + 1) / 2)
  h.updated_to = pos
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

-- Encodes a decoded record `rec` of which only the state and the update time
-- changed: the bytes around the update time are copied as they are.
local function restamp(h, rec)
  local parts = { char(h.flags * 32 + h.state * 8 + h.prio), sub(rec, 2, h.updated_from - 1) }
  put_varint(parts, zig(h.updated - h.create))
  parts[#parts + 1] = sub(rec, h.updated_to)
  return table.concat(parts)
end
