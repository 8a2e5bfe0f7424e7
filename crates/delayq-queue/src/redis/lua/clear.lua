-- clear.lua: removes every job of one shard; returns how many there were.
-- KEYS: the common three (lib.lua).
local fields = redis.call('HKEYS', M)
for _, field in ipairs(fields) do
  if sub(field, 1, 1) == 'r' then
    redis.call('DEL', BASE .. 'r:' .. sub(field, 2))
  end
end
local held = redis.call('HLEN', J)
-- The data epoch stays: clearing is not a loss of data (mark.lua).
local epoch = redis.call('HGET', M, '@epoch')
redis.call('DEL', J, D, M)
if epoch then
  redis.call('HSET', M, '@epoch', epoch)
end
return held
