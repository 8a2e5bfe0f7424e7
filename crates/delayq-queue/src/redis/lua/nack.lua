-- nack.lua: gives a reserved job back: waiting again after a delay with attempt + 1,
-- or dead (removed) when it has no retries left (attempt - 1 >= max_retries).
-- KEYS: the common three (lib.lua).
-- ARGV[5] id, ARGV[6] delay ms, ARGV[7] the delivery (attempt) the caller holds ('' for any)
-- Returns: { 'ok', topic, record, state after (0 delay, 1 ready, 5 dead), wake due or nil,
--            {readied topics} } | { 'nf' } | { 'ws', state } | { 'wa', current attempt }
local id = ARGV[5]
local rec, h, refused = load_reserved(id, ARGV[7])
if refused then
  return refused
end
local topic = topic_name(h.topic)
detach(id, h.state, topic)
if h.attempt - 1 >= h.max_retries then
  redis.call('HDEL', J, id)
  local due, topics = done()
  return { 'ok', topic, rec, DEAD, due, topics }
end
h.attempt = h.attempt + 1
h.updated = NOW
h.run_at = NOW + tonumber(ARGV[6])
if h.run_at <= NOW then
  h.state = READY
else
  h.state = DELAY
end
rec = encode(h)
redis.call('HSET', J, id, rec)
attach(id, h, topic)
local due, topics = done()
return { 'ok', topic, rec, h.state, due, topics }
