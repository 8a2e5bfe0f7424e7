-- promote.lua: applies what is due in one shard at ARGV[2], at most ARGV[5] timeline entries:
--   delay    -> ready
--   reserved -> ready with attempt + 1 and run_at = the ttr deadline, or dead (removed)
--               when out of retries (attempt - 1 >= max_retries)
--   ready    -> expired (removed): its ttl passed unpopped
--   (the ends, dead and expired, are noted for restores under way, index.lua)
-- KEYS: the common three (lib.lua).
-- ARGV[5] the most entries to apply (0: only report the next due instant)
-- ARGV[6] the caller's leader epoch (0: not fenced). Rounds record it in M ('@fence',
--         '@fence_at'); a round carrying a lower epoch than one recorded in the last
--         FENCE_HOLD ms is refused, so a stale leader cannot promote after its successor.
--         (The hold lets a lower epoch through when the higher one has stopped writing,
--         say after the coordinator's data was wiped and terms restarted from 1.)
-- Returns: { {id, topic, record, state after, ...}, next due instant or nil,
--            wake due or nil, {readied topics} }
local limit = tonumber(ARGV[5])
local fence = tonumber(ARGV[6]) or 0
local FENCE_HOLD = 30000
if fence > 0 then
  local held = redis.call('HMGET', M, '@fence', '@fence_at')
  local held_epoch, held_at = tonumber(held[1]) or 0, tonumber(held[2]) or 0
  if fence < held_epoch and NOW - held_at < FENCE_HOLD then
    return redis.error_reply('FENCED: leader epoch ' .. fence .. ' is older than ' .. held_epoch)
  end
  if fence ~= held_epoch or NOW - held_at >= 1000 then
    redis.call('HSET', M, '@fence', fence, '@fence_at', NOW)
  end
end
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
          h.state = READY
          rec = encode(h)
        else
          h.state = READY
          rec = restamp(h, rec)
        end
        redis.call('HSET', J, id, rec)
        attach(id, h, topic)
        report(id, topic, rec, READY)
      elseif h.state == RESERVED then
        redis.call('HDEL', J, id)
        note_end(id)
        report(id, topic, rec, DEAD)
      else
        redis.call('ZREM', BASE .. 'r:' .. topic, id)
        redis.call('HDEL', J, id)
        note_end(id)
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
