-- topics.lua: topic interning; records carry a small per-shard code instead of the name.
-- Needs varint.lua.

local names, codes = {}, {}

local function topic_name(code)
  local name = names[code]
  if not name then
    name = redis.call('HGET', M, '#c' .. code)
    names[code] = name
  end
  return name
end

-- The code the shard gave topic `name`, or nil when it gave none yet. `held` is
-- the shard's '#n' .. name field when the caller read it already (false: absent).
local function held_code(name, held)
  local code = codes[name]
  if code then
    return code
  end
  if held == nil then
    held = redis.call('HGET', M, '#n' .. name)
  end
  if not held then
    return nil
  end
  code = tonumber(held)
  codes[name] = code
  names[code] = name
  return code
end

local function topic_code(name)
  local code = held_code(name)
  if code then
    return code
  end
  code = redis.call('HINCRBY', M, '#last', 1)
  redis.call('HSET', M, '#n' .. name, code, '#c' .. code, name)
  codes[name] = code
  names[code] = name
  return code
end

-- Splices the topic code in after the first byte of a record built by Rust without one.
local function with_topic_code(rec, code)
  local parts = { sub(rec, 1, 1) }
  put_varint(parts, code)
  parts[#parts + 1] = sub(rec, 2)
  return table.concat(parts)
end

