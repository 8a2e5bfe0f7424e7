-- replace.lua: swaps a waiting (delay or ready) job for a new version with the same id.
-- KEYS: the common three (lib.lua).
-- ARGV[5] id, ARGV[6] topic, ARGV[7] record, ARGV[8] score, ARGV[9] expiry
--   (as one job of schedule.lua)
-- Returns: { 'ok', record, wake due or nil, {readied topics} } | { 'nf' } | { 'ws', state }
local id, topic = ARGV[5], ARGV[6]
local old = redis.call('HGET', J, id)
if not old then
  return { 'nf' }
end
local h = decode(old)
if h.state == RESERVED then
  return { 'ws', h.state }
end
detach(id, h.state, topic_name(h.topic))
local rec = with_topic_code(ARGV[7], topic_code(topic))
redis.call('HSET', J, id, rec)
local state = floor(byte(rec, 1) / 8) % 4
count(state, topic, 1)
if state == DELAY then
  arm(id, tonumber(ARGV[8]))
else
  enqueue_ready(id, topic, ARGV[8], tonumber(ARGV[9]))
end
local due, topics = done()
return { 'ok', rec, due, topics }
