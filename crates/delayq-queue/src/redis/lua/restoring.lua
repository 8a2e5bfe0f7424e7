-- restoring.lua: opens (or extends) the shard's restore window before a restore reads
-- the store (see index.lua); returns the Redis time (ms) the restore's write carries.
-- KEYS: the common three (lib.lua).
local now = server_ms()
-- Clears what a lapsed window kept before this one starts.
restore_window()
local until_text = string.format('%.0f', now + RESTORE_WINDOW)
redis.call('HSET', M, '@restoring', until_text)
redis.call('PEXPIREAT', BASE .. 'e', until_text)
-- Ends before the oldest time a restore may still carry are of no use.
redis.call('ZREMRANGEBYSCORE', BASE .. 'e', '-inf', '(' .. string.format('%.0f', now - RESTORE_WINDOW))
return now
