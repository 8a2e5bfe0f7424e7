-- touch.lua: restarts the ttr clock of a reserved job (the deadline only moves later,
-- so the timer needs no wakeup).
-- KEYS: the common three (lib.lua).
-- ARGV[5] id, ARGV[6] the delivery (attempt) the caller holds ('' for any)
-- Returns: { 'ok', topic, record } | { 'nf' } | { 'ws', state } | { 'wa', current attempt }
local id = ARGV[5]
local rec = redis.call('HGET', J, id)
if not rec then
  return { 'nf' }
end
local h = decode(rec)
if h.state ~= RESERVED then
  return { 'ws', h.state }
end
if ARGV[6] ~= '' and h.attempt ~= tonumber(ARGV[6]) then
  return { 'wa', h.attempt }
end
redis.call('ZADD', D, NOW + h.ttr, id)
return { 'ok', topic_name(h.topic), rec }
