-- reserve.lua: pops the most urgent ready jobs of one topic and reserves them until now + ttr.
-- KEYS: the common three (lib.lua), then KEYS[4] the topic's ready queue {p:s}:r:<topic>.
-- ARGV[5] topic, ARGV[6] the most jobs to take
-- Returns: { {id, record, id, record, ...}, ready jobs left, wake due or nil, {readied topics} }
local R, topic = KEYS[4], ARGV[5]
local out = {}
local popped = redis.call('ZPOPMIN', R, tonumber(ARGV[6]))
for i = 1, #popped, 2 do
  local id = popped[i]
  local rec = redis.call('HGET', J, id)
  if rec then
    local h = decode(rec)
    if h.ttl > 0 then
      redis.call('ZREM', D, id)
    end
    count(READY, topic, -1)
    h.state = RESERVED
    h.updated = NOW
    rec = restamp(h, rec)
    redis.call('HSET', J, id, rec)
    count(RESERVED, topic, 1)
    arm(id, NOW + h.ttr)
    out[#out + 1] = id
    out[#out + 1] = rec
  end
end
local left = redis.call('ZCARD', R)
local due, topics = done()
return { out, left, due, topics }
