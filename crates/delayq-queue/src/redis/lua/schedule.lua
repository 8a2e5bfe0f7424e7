-- schedule.lua: adds jobs the shard does not hold yet (schedule, schedule_batch, restore).
-- KEYS: the common three (lib.lua).
-- ARGV[5]: the restore fence: 0 for a push; for a restore, the Redis time its window
--   was opened at before it read the store (restoring.lua). A job the shard was told to
--   end at or after that time is not added back (index.lua); a restore whose window has
--   lapsed is refused as a whole.
-- ARGV[6]: k, the number of (topic, code) pairs that follow: the topic codes the
--   caller believes this shard has given the topics of the call. With k = 0, the
--   records come without a topic code and this script splices it in after the
--   first byte; with k > 0 they carry it already, which saves copying each
--   record twice here. The pairs are checked first: a code the shard no longer
--   gives the topic (freed with the topic's last job, or the shard lost its
--   metadata) is replaced in that topic's records by the shard's code.
-- ARGV[7 .. 6 + 2k]: the pairs. Then five per job:
--   id       encoded id (the pool field)
--   topic    topic name
--   record   job record (with or without its topic code, as above); its state (delay or
--            ready, or reserved for a job restored from the store) was decided by the
--            caller against ARGV[2]
--   score    run_at when delayed; priority * 2^43 + run_at when ready; the ttr
--            deadline when reserved
--   expiry   run_at + ttl for a ready job with a ttl, else 0
-- A push (fence 0) of a delayed job due after the shard's @horizon (horizon.lua) is
-- not added unless the shard holds its id: the store keeps it until the loader brings it.
-- Returns: { {1 added | 0 already held (or ended since the fence) | 2 beyond the horizon, ...},
--            wake due or nil, {readied topics},
--            {topic, code, ...} of the call's topics when k = 0, else of those
--            whose pair did not hold; a topic left without a job is left out }
-- (The first job's topic code and @next are read in one HMGET: a single push costs
-- four commands: HMGET, HSETNX, ZADD, HINCRBY.)
local fence = tonumber(ARGV[5])
if fence > 0 and not (restore_window() and server_ms() < fence + RESTORE_WINDOW) then
  return redis.error_reply('RESTORE_LAPSED: the restore window opened at ' .. ARGV[5] .. ' has closed')
end
local pair_count = tonumber(ARGV[6])
local first_job = 7 + 2 * pair_count
-- One read for the first topic's code, the announced earliest instant and the horizon.
local first_topic = ARGV[first_job + 1]
local known = redis.call('HMGET', M, '#n' .. first_topic, '@next', '@horizon')
held_code(first_topic, known[1])
announced_due = known[2] and tonumber(known[2]) or false
local horizon = fence == 0 and known[3] and tonumber(known[3])
local recoded = {}
for p = 7, first_job - 1, 2 do
  if held_code(ARGV[p]) ~= tonumber(ARGV[p + 1]) then
    recoded[ARGV[p]] = true
  end
end

-- Puts `code` in place of the topic code a record carries.
local function recode(rec, code)
  local _, rest = read_varint(rec, 2)
  local parts = { sub(rec, 1, 1) }
  put_varint(parts, code)
  parts[#parts + 1] = sub(rec, rest)
  return table.concat(parts)
end

local coded = pair_count > 0
local added = {}
for i = first_job, #ARGV, 5 do
  local id, topic = ARGV[i], ARGV[i + 1]
  local rec = ARGV[i + 2]
  local state = floor(byte(rec, 1) / 8) % 4
  if horizon and state == DELAY and tonumber(ARGV[i + 3]) > horizon
      and redis.call('HEXISTS', J, id) == 0 then
    added[#added + 1] = 2
  else
    if not coded then
      rec = with_topic_code(rec, topic_code(topic))
    elseif recoded[topic] then
      rec = recode(rec, topic_code(topic))
    end
    local ended = fence > 0 and redis.call('ZSCORE', BASE .. 'e', id)
    if ended and tonumber(ended) >= fence then
      -- Ended since the restore read the store: what it read is stale.
      added[#added + 1] = 0
      note_topic(topic)
    elseif redis.call('HSETNX', J, id, rec) == 0 then
      added[#added + 1] = 0
      -- The topic may have got its code in this call and hold no job: done() looks.
      note_topic(topic)
    else
      count(state, topic, 1)
      if state == DELAY or state == RESERVED then
        arm(id, tonumber(ARGV[i + 3]))
      else
        enqueue_ready(id, topic, ARGV[i + 3], tonumber(ARGV[i + 4]))
      end
      added[#added + 1] = 1
    end
  end
end
local due, topics = done()
local learned = {}
for topic, code in pairs(codes) do
  if (not coded or recoded[topic]) and not released[topic] then
    learned[#learned + 1] = topic
    learned[#learned + 1] = code
  end
end
return { added, due, topics, learned }
