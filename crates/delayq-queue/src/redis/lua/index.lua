-- index.lua: filing jobs in the timeline, the ready queues and the counts, and the
-- signals a call publishes. Needs nothing but lib.lua.

-- Live counts change in memory and are written once per field by done().
local count_deltas, count_fields = {}, {}
-- The count field of each topic by state, built once per call, not once per job.
local field_names = { {}, {}, {} }
-- The topic of each count field of the call.
local field_topics = {}
-- Topics done() checks for a live job left in the shard: those whose counts
-- the call changed, and those noted by the script (given a code, say).
local noted, noted_list = {}, {}
-- Topics done() freed: the shard no longer gives them a code.
local released = {}

local function note_topic(topic)
  if not noted[topic] then
    noted[topic] = true
    noted_list[#noted_list + 1] = topic
  end
end

local function count(state, topic, delta)
  local of_state = field_names[state + 1]
  local field = of_state[topic]
  if field == nil then
    field = sub(LETTERS, state + 1, state + 1) .. topic
    of_state[topic] = field
  end
  local current = count_deltas[field]
  if current == nil then
    count_fields[#count_fields + 1] = field
    field_topics[field] = topic
    note_topic(topic)
    current = 0
  end
  count_deltas[field] = current + delta
end

-- Signals gathered by this call, published (and returned) by done().
local wake_due = false
local readied, readied_list = {}, {}
-- The shard's announced earliest instant, @next (nil: not read yet, false: none).
local announced_due = nil

-- Puts an instant on the timeline; announces it (a wake) when it is sooner
-- than the announced earliest. Timers know at least the announced instant,
-- so they wake in time for anything later; @next only errs early (an entry
-- removed since), which costs a timer round, never a late job.
local function arm(id, at)
  if announced_due == nil then
    local announced = redis.call('HGET', M, '@next')
    announced_due = announced and tonumber(announced) or false
  end
  redis.call('ZADD', D, at, id)
  if announced_due == false or at < announced_due then
    announced_due = at
    wake_due = at
  end
end

-- Files a job in its topic's ready queue (score computed by the caller) and arms its ttl expiry.
local function enqueue_ready(id, topic, score, expiry)
  local key = BASE .. 'r:' .. topic
  redis.call('ZADD', key, score, id)
  if expiry > 0 then
    arm(id, expiry)
  end
  -- Waiters only need a signal when the queue goes from empty to not empty,
  -- which only the first job of this call into the queue can do.
  if readied[topic] == nil then
    readied[topic] = redis.call('ZCARD', key) == 1
    if readied[topic] then
      readied_list[#readied_list + 1] = topic
    end
  end
end

-- Files a decoded job by its state (delay or ready).
local function attach(id, h, topic)
  count(h.state, topic, 1)
  if h.state == DELAY then
    arm(id, h.run_at)
  else
    local expiry = 0
    if h.ttl > 0 then
      expiry = h.run_at + h.ttl
    end
    enqueue_ready(id, topic, h.prio * PRIORITY_WEIGHT + h.run_at, expiry)
  end
end

-- Takes a job in `state` out of the timeline, its ready queue and the counts (not the pool).
local function detach(id, state, topic)
  count(state, topic, -1)
  redis.call('ZREM', D, id)
  if state == READY then
    redis.call('ZREM', BASE .. 'r:' .. topic, id)
  end
end

-- Frees the code and name ('#n', '#c') of each noted topic that has no
-- live job left in the shard (no delay, ready or reserved count), so the
-- metadata hash holds only live topics. `live`: topics a count of which
-- this call left above zero. Counts cover every record of the pool, so no
-- record carries a freed code; and since only the end of a call frees, a
-- job taken out and filed again within one call (nack, promote, replace)
-- keeps its topic. A freed code is never given again ('#last' only grows),
-- so a code a node still remembers is found stale, and replaced, by schedule.lua.
local function release_idle_topics(live)
  for _, topic in ipairs(noted_list) do
    if not live[topic] then
      local held = redis.call('HMGET', M, 'd' .. topic, 'r' .. topic, 'x' .. topic, '#n' .. topic)
      if not held[1] and not held[2] and not held[3] and held[4] then
        redis.call('HDEL', M, '#n' .. topic, '#c' .. held[4])
        released[topic] = true
      end
    end
  end
end

-- Restore windows. A restore reads live jobs from the store, then writes those the
-- shard lacks back into it; a job another node ends in between (store first, then
-- this shard) would come back live, and be delivered again, from what the restore
-- read. So a restore first opens a window (restoring.lua) and notes the Redis time;
-- while the window is open, every job the shard is told to end is kept in
-- {p:s}:e with the time of its end, and the restore's write skips any job ended
-- at or after the time it noted (schedule.lua). Redis time, not the callers'
-- clocks: the nodes that end jobs and the one that restores may disagree.
local server_now = nil
local function server_ms()
  if server_now == nil then
    local time = redis.call('TIME')
    server_now = tonumber(time[1]) * 1000 + floor(tonumber(time[2]) / 1000)
  end
  return server_now
end

-- The end of the open restore window (Redis time, ms), or false when none is open.
local restoring_until = nil
local function restore_window()
  if restoring_until == nil then
    restoring_until = tonumber(redis.call('HGET', M, '@restoring')) or false
    if restoring_until and restoring_until <= server_ms() then
      -- Lapsed: no restore can use what it kept.
      redis.call('HDEL', M, '@restoring')
      redis.call('DEL', BASE .. 'e')
      restoring_until = false
    end
  end
  return restoring_until
end

-- Notes that the caller ended job `id` (or is ending it), for restores under way.
local function note_end(id)
  if restore_window() then
    redis.call('ZADD', BASE .. 'e', server_ms(), id)
    -- What it keeps goes with the window, should no later call clear it.
    redis.call('PEXPIREAT', BASE .. 'e', string.format('%.0f', restoring_until))
  end
end

-- Writes the counts, frees idle topics, publishes what this call changed,
-- and returns the signals for the caller's own node: wake due (or false),
-- readied topics.
local function done()
  local live = {}
  for _, field in ipairs(count_fields) do
    local delta = count_deltas[field]
    if delta ~= 0 then
      if redis.call('HINCRBY', M, field, delta) <= 0 then
        redis.call('HDEL', M, field)
      else
        live[field_topics[field]] = true
      end
    end
  end
  release_idle_topics(live)
  local due = false
  if wake_due then
    due = string.format('%.0f', wake_due)
    redis.call('HSET', M, '@next', due)
    redis.call('PUBLISH', PREFIX .. ':wake', ORIGIN .. ' ' .. due .. ' ' .. SHARD)
  end
  for _, topic in ipairs(readied_list) do
    redis.call('PUBLISH', PREFIX .. ':ready', ORIGIN .. ' ' .. SHARD .. ' ' .. topic)
  end
  return due, readied_list
end
