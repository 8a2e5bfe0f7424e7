-- get.lua: reads jobs and their topic names.
-- KEYS: the common three (lib.lua).
-- ARGV[5..] ids
-- Returns: one item per id, in order: { topic, record } | false (not held)
local out = {}
for i = 5, #ARGV do
  local rec = redis.call('HGET', J, ARGV[i])
  if rec then
    out[#out + 1] = { topic_name(read_varint(rec, 2)), rec }
  else
    out[#out + 1] = false
  end
end
return out
