-- promote.lua: applies what is due in one shard at ARGV[2], at most ARGV[5] timeline entries:
--   delay    -> ready
--   reserved -> ready with attempt + 1 and run_at = the ttr deadline, or dead (removed)
--               when out of retries (attempt - 1 >= max_retries)
--   ready    -> expired (removed): its ttl passed unpopped
-- KEYS: the common three (lib.lua).
-- ARGV[5] the most entries to apply (0: only report the next due instant)
-- Returns: { {id, topic, record, state after, ...}, next due instant or nil,
--            wake due or nil, {readied topics} }
local limit = tonumber(ARGV[5])
local changed = {}
local function report(id, topic, rec, state)
  changed[#changed + 1] = id
  changed[#changed + 1] = topic
  changed[#changed + 1] = rec
  changed[#changed + 1] = state
end
if limit > 0 then
  local due = redis.call('ZRANGEBYSCORE', D, '-inf', NOW, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #due, 2 do
    local id, at = due[i], tonumber(due[i + 1])
    local rec = redis.call('HGET', J, id)
    redis.call('ZREM', D, id)
    if rec then
      local h = decode(rec)
      local topic = topic_name(h.topic)
      count(h.state, topic, -1)
      h.updated = NOW
      if h.state == DELAY or (h.state == RESERVED and h.attempt - 1 < h.max_retries) then
        if h.state == RESERVED then
          h.attempt = h.attempt + 1
          h.run_at = at
        end
        h.state = READY
        rec = encode(h)
        redis.call('HSET', J, id, rec)
        attach(id, h, topic)
        report(id, topic, rec, READY)
      elseif h.state == RESERVED then
        redis.call('HDEL', J, id)
        report(id, topic, rec, DEAD)
      else
        redis.call('ZREM', BASE .. 'r:' .. topic, id)
        redis.call('HDEL', J, id)
        report(id, topic, rec, EXPIRED)
      end
    end
  end
end
local wake, topics = done()
-- The timer learns the shard's earliest instant from this reply: announce it.
local first = redis.call('ZRANGE', D, 0, 0, 'WITHSCORES')
local next_due = first[2] or false
if next_due then
  redis.call('HSET', M, '@next', next_due)
else
  redis.call('HDEL', M, '@next')
end
return { changed, next_due, wake, topics }
