-- remove.lua: ends live jobs (finish: only a reserved one; delete: any), each judged alone.
-- KEYS: the common three (lib.lua).
-- ARGV[5..]: three per job: id, 'finish' | 'delete', the delivery (attempt) a finish
--   names ('' for none: any delivery)
-- Returns: one reply per job, in order:
--   { 'ok', topic, record as it was } | { 'nf' } | { 'ws', state } | { 'wa', current attempt }
-- (A job named twice is removed by the first and not found by the second.)
-- Every job removed, and every one not found (its caller ended it in the store, and
-- the shard may only have lost it), is noted for restores under way (index.lua).
local out = {}
for i = 5, #ARGV, 3 do
  local id = ARGV[i]
  local rec = redis.call('HGET', J, id)
  if not rec then
    note_end(id)
    out[#out + 1] = { 'nf' }
  else
    local state, code = peek(rec)
    local attempt = ARGV[i + 1] == 'finish' and ARGV[i + 2] ~= '' and attempt_of(rec)
    if ARGV[i + 1] == 'finish' and state ~= RESERVED then
      out[#out + 1] = { 'ws', state }
    elseif attempt and attempt ~= tonumber(ARGV[i + 2]) then
      out[#out + 1] = { 'wa', attempt }
    else
      local topic = topic_name(code)
      detach(id, state, topic)
      redis.call('HDEL', J, id)
      note_end(id)
      out[#out + 1] = { 'ok', topic, rec }
    end
  end
end
done()
return out
