-- lib.lua: the first part of every delayq script (scripts.rs prepends it, then the
-- other parts a script needs: varint.lua, record.lua, topics.lua, index.lua, reserved.lua). The
-- parts are kept apart because each call runs its whole prelude: a script that
-- creates fewer closures runs faster.
--
-- Common KEYS (all in one shard, so one cluster slot: they share the hash tag {prefix:shard}):
--   KEYS[1] {p:s}:j  HASH  job pool: field = encoded id, value = job record
--   KEYS[2] {p:s}:d  ZSET  timeline: member = id, score = the job's one pending instant
--                          (run_at when delayed, ttl expiry when ready, ttr deadline when reserved)
--   KEYS[3] {p:s}:m  HASH  shard metadata, fields:
--                          d|r|x .. topic   live count of the topic in state delay|ready|reserved
--                                           (absent when zero)
--                          #n .. topic      the topic's code; #c .. code: its name. A topic has
--                                           these only while it has a live job in the shard
--                                           (index.lua's done() frees them)
--                          #last            the last code given; it only grows, so a freed
--                                           code is never given again
--                          @next            the shard's earliest instant as last announced (set
--                                           by promote, lowered by every instant that publishes a wake)
--                          @epoch           the data epoch of <prefix>:meta the shard was marked
--                                           with (mark.lua); its absence means the shard lost its data
--                          @fence @fence_at the highest leader epoch a promote round carried,
--                                           and when (promote.lua)
--                          @restoring       the Redis time (ms) until which the shard keeps the
--                                           jobs it ends in {p:s}:e (restoring.lua)
--                          ('#' and '@' are outside the topic charset, so fields never collide)
-- Ready queues {p:s}:r:<topic> (ZSET, score = priority * 2^43 + run_at) are derived from KEYS[1]
-- and share its hash tag, as does {p:s}:e (ZSET, member = id, score = the Redis time of its
-- end): the jobs the shard was told to end while a restore window was open (index.lua).
-- Common ARGV:
--   ARGV[1] origin: the calling scheduler instance, echoed in published messages
--   ARGV[2] now: the caller's wall clock in epoch ms
--   ARGV[3] prefix: channels are <prefix>:wake and <prefix>:ready
--   ARGV[4] shard index
-- Script arguments start at ARGV[5].
--
-- Job record (value in the pool; Rust's codec.rs is the other half):
--   byte 1          priority (bits 0-2) + state (bits 3-4: 0 delay, 1 ready, 2 reserved) + flags (bits 5-7)
--   varint          topic code
--   varint          attempt
--   varint          max_retries
--   varint          create_time (epoch ms)
--   zigzag varint   run_at - create_time
--   zigzag varint   updated_at - create_time
--   varint          ttr ms
--   varint          ttl ms
--   zigzag varint   delay - (run_at - create_time)
--   tail            opaque to Lua: body, subtopic, biz_key, backoff, result
-- Lua numbers are doubles: every value stays below 2^53.

local J, D, M = KEYS[1], KEYS[2], KEYS[3]
local BASE = string.sub(J, 1, -2)
local ORIGIN = ARGV[1]
local NOW = tonumber(ARGV[2])
local PREFIX = ARGV[3]
local SHARD = ARGV[4]

local DELAY, READY, RESERVED, DEAD, EXPIRED = 0, 1, 2, 5, 6
local LETTERS = 'drx' -- count field prefix by state (delay, ready, reserved)
local PRIORITY_WEIGHT = 8796093022208 -- 2^43 ms, about 278 years
-- How long a restore may take from opening its window (before it reads one page of the
-- store) to writing that page back (restoring.lua, schedule.lua), in ms of Redis time:
-- twice the store's statement deadline. Every job ended within the last window is kept
-- in {p:s}:e, and the horizon's loader opens windows all the time, so it stays short.
local RESTORE_WINDOW = 20000

local floor, byte, char, sub = math.floor, string.byte, string.char, string.sub

