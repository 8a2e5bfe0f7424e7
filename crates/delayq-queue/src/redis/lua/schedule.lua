-- schedule.lua: adds jobs the shard does not hold yet (schedule, schedule_batch, restore).
-- KEYS: the common three (lib.lua).
-- ARGV[5..]: five per job:
--   id       encoded id (the pool field)
--   topic    topic name
--   record   job record built without a topic code; its state (delay or ready, or
--            reserved for a job restored from the store) was decided by the caller against ARGV[2]
--   score    run_at when delayed; priority * 2^43 + run_at when ready; the ttr
--            deadline when reserved
--   expiry   run_at + ttl for a ready job with a ttl, else 0
-- Returns: { {1 added | 0 already held, ...}, wake due or nil, {readied topics} }
-- (The first job's topic code and @next are read in one HMGET: a single push costs
-- four commands: HMGET, HSETNX, ZADD, HINCRBY.)
-- One read for the first topic's code and the announced earliest instant.
local first_topic = ARGV[6]
local known = redis.call('HMGET', M, '#n' .. first_topic, '@next')
if known[1] then
  codes[first_topic] = tonumber(known[1])
  names[codes[first_topic]] = first_topic
end
announced_due = known[2] and tonumber(known[2]) or false
local added = {}
for i = 5, #ARGV, 5 do
  local id, topic = ARGV[i], ARGV[i + 1]
  local rec = with_topic_code(ARGV[i + 2], topic_code(topic))
  if redis.call('HSETNX', J, id, rec) == 0 then
    added[#added + 1] = 0
  else
    local state = floor(byte(rec, 1) / 8) % 4
    count(state, topic, 1)
    if state == DELAY or state == RESERVED then
      arm(id, tonumber(ARGV[i + 3]))
    else
      enqueue_ready(id, topic, ARGV[i + 3], tonumber(ARGV[i + 4]))
    end
    added[#added + 1] = 1
  end
end
local due, topics = done()
return { added, due, topics }
