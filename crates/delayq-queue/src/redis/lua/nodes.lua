-- nodes.lua: the registry of the delayq nodes on one prefix and the store each
-- writes to (run alone, without lib.lua).
-- KEYS[1] <prefix>:nodes  HASH: instance → '<heartbeat ms>|<store id>|<node name>'
-- ARGV[1] 'join', 'beat' or 'leave'
-- ARGV[2] the instance id of the calling process (unique per process)
-- ARGV[3] its store id
-- ARGV[4] its node name
-- ARGV[5] the expiry in ms: a node whose heartbeat is older is gone
-- Heartbeats carry Redis's clock, so the nodes' clocks need not agree.
-- Drops the entries of nodes that are gone, then: 'join' writes the caller's
-- entry unless a live node uses another store; 'beat' writes it in any case
-- (that node is running already); 'leave' removes it.
-- Returns {} or, when a live node uses another store,
-- { its name, its store id, ms since its heartbeat }.
local key, mode, instance, store, name = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local expiry = tonumber(ARGV[5])

if mode == 'leave' then
  redis.call('HDEL', key, instance)
  return {}
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local entries = redis.call('HGETALL', key)
local foreign = nil
for i = 1, #entries, 2 do
  local other = entries[i]
  if other ~= instance then
    local at, other_store, other_name = string.match(entries[i + 1], '^(%d+)|([^|]*)|(.*)$')
    local age = at and (now - tonumber(at))
    if not age or age > expiry then
      redis.call('HDEL', key, other)
    elseif other_store ~= store and not foreign then
      foreign = { other_name, other_store, math.max(age, 0) }
    end
  end
end

if foreign and mode == 'join' then
  return foreign
end
redis.call('HSET', key, instance, string.format('%d|%s|%s', now, store, name))
-- The registry of a prefix no node uses any more goes away by itself.
redis.call('PEXPIRE', key, expiry)
return foreign or {}
