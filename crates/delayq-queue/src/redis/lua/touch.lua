-- touch.lua: restarts the ttr clock of a reserved job (the deadline only moves later,
-- so the timer needs no wakeup).
-- KEYS: the common three (lib.lua).
-- ARGV[5] id
-- Returns: { 'ok', topic, record } | { 'nf' } | { 'ws', state }
local id = ARGV[5]
local rec = redis.call('HGET', J, id)
if not rec then
  return { 'nf' }
end
local h = decode(rec)
if h.state ~= RESERVED then
  return { 'ws', h.state }
end
redis.call('ZADD', D, NOW + h.ttr, id)
return { 'ok', topic_name(h.topic), rec }
