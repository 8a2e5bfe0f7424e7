-- get.lua: reads one job and its topic name.
-- KEYS: the common three (lib.lua).
-- ARGV[5] id
-- Returns: { topic, record } | nil
local rec = redis.call('HGET', KEYS[1], ARGV[5])
if not rec then
  return false
end
local code = read_varint(rec, 2)
return { topic_name(code), rec }
