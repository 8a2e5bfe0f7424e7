-- touch.lua: restarts the ttr clock of a reserved job (the deadline only moves later,
-- so the timer needs no wakeup).
-- KEYS: the common three (lib.lua).
-- ARGV[5] id, ARGV[6] the delivery (attempt) the caller holds ('' for any)
-- Returns: { 'ok', topic, record } | { 'nf' } | { 'ws', state } | { 'wa', current attempt }
local id = ARGV[5]
local rec, h, refused = load_reserved(id, ARGV[6])
if refused then
  return refused
end
redis.call('ZADD', D, NOW + h.ttr, id)
return { 'ok', topic_name(h.topic), rec }
