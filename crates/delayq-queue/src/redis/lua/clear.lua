-- clear.lua: removes every job of one shard; returns how many there were.
-- KEYS: the common three (lib.lua).
local fields = redis.call('HKEYS', M)
for _, field in ipairs(fields) do
  if sub(field, 1, 1) == 'r' then
    redis.call('DEL', BASE .. 'r:' .. sub(field, 2))
  end
end
local held = redis.call('HLEN', J)
-- The data epoch stays: clearing is not a loss of data (mark.lua); so does the leader
-- fence, and the last topic code, so that no code is ever given twice (index.lua).
local kept_fields = { '@epoch', '@fence', '@fence_at', '#last' }
local kept = redis.call('HMGET', M, unpack(kept_fields))
redis.call('DEL', J, D, M)
for i, field in ipairs(kept_fields) do
  if kept[i] then
    redis.call('HSET', M, field, kept[i])
  end
end
return held
