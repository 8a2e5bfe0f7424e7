-- remove.lua: ends a live job (finish: only a reserved one; delete: any).
-- KEYS: the common three (lib.lua).
-- ARGV[5] id, ARGV[6] 'finish' | 'delete'
-- Returns: { 'ok', topic, record as it was } | { 'nf' } | { 'ws', state }
local id = ARGV[5]
local rec = redis.call('HGET', J, id)
if not rec then
  return { 'nf' }
end
local state, code = peek(rec)
if ARGV[6] == 'finish' and state ~= RESERVED then
  return { 'ws', state }
end
local topic = topic_name(code)
detach(id, state, topic)
redis.call('HDEL', J, id)
done()
return { 'ok', topic, rec }
