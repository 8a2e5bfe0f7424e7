-- horizon.lua: reads or raises one shard's horizon marks (run alone, without lib.lua).
-- KEYS[1] {p:s}:m  the shard's metadata hash; its fields:
--   @horizon  a new job due at or before this instant (epoch ms) is held at once
--             (schedule.lua); one due later is left to the store until the loader brings it
--   @loaded   every live job of the store due at or before this instant is held
-- Both only grow. A shard without @horizon holds every new job (no horizon); one
-- without @loaded is loaded from the start. Both go with the shard's data: a shard
-- that lost its data holds every new job again until a loader raises the marks.
-- ARGV[1] 'admit' | 'loaded' | 'read'
-- ARGV[2] the instant to raise the mark to (admit, loaded)
-- Returns { @horizon or false, @loaded or false } after the change, as strings.
local M = KEYS[1]
local function raise(field, to)
  local current = tonumber(redis.call('HGET', M, field))
  if current == nil or current < to then
    redis.call('HSET', M, field, string.format('%.0f', to))
  end
end
if ARGV[1] == 'admit' then
  raise('@horizon', tonumber(ARGV[2]))
elseif ARGV[1] == 'loaded' then
  raise('@loaded', tonumber(ARGV[2]))
  -- What is loaded is admitted too.
  raise('@horizon', tonumber(ARGV[2]))
end
return redis.call('HMGET', M, '@horizon', '@loaded')
