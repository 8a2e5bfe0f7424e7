-- reserved.lua: reading a reserved job for a call that acts on one delivery of it
-- (nack, touch). Needs record.lua.

-- The job `id` if it is reserved and, unless `attempt` is '', at that delivery: its record
-- and decoded fields. Otherwise nil, nil and the refusal to return: { 'nf' } (no such job),
-- { 'ws', state } (not reserved), { 'wa', current attempt } (another delivery).
local function load_reserved(id, attempt)
  local rec = redis.call('HGET', J, id)
  if not rec then
    return nil, nil, { 'nf' }
  end
  local h = decode(rec)
  if h.state ~= RESERVED then
    return nil, nil, { 'ws', h.state }
  end
  if attempt ~= '' and h.attempt ~= tonumber(attempt) then
    return nil, nil, { 'wa', h.attempt }
  end
  return rec, h, nil
end
