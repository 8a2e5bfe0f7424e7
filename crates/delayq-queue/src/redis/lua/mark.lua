-- mark.lua: checks that a shard still carries the data epoch (run alone, without lib.lua).
-- KEYS[1] {p:s}:m  the shard's metadata hash; its '@epoch' field is the marker
-- ARGV[1] the epoch recorded in <prefix>:meta
-- Returns 1 when the shard carries the epoch (it kept its data since it was
-- marked), else 0 after marking it: the shard was emptied (restart without
-- persistence, FLUSHALL, failover to an empty replica) or never marked.
if redis.call('HGET', KEYS[1], '@epoch') == ARGV[1] then
  return 1
end
redis.call('HSET', KEYS[1], '@epoch', ARGV[1])
return 0
