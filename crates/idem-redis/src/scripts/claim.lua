-- claim: KEYS[1] record, KEYS[2] the fence counter of its slot, KEYS[3] the
-- index of its slot, KEYS[4] the open set of its slot.
-- ARGV: tool, fingerprint, check fingerprint ('1'/'0'), lease ms, worker
-- given ('1'/'0'), worker, call details JSON ('' when nothing is known), key.
-- Answers that change nothing write nothing.
local now = now_ms()
local lease_until = now + tonumber(ARGV[4])
local h, flat, rejection = load_live(now)
if rejection then
  return rejection
end
if h == nil then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'tool', ARGV[1], 'fp', ARGV[2], 'created', fmt(now),
    'state', 'f', 'fence', fmt(fence), 'lease', fmt(lease_until))
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[1], 'info', ARGV[7])
  end
  if ARGV[5] == '1' then
    redis.call('HSET', KEYS[1], 'worker', ARGV[6])
  end
  index(KEYS[3], ARGV[8])
  redis.call('ZADD', KEYS[4], now, ARGV[8])
  return {'acquired', fmt(fence), fmt(lease_until)}
end
if h.tool ~= ARGV[1] or (ARGV[3] == '1' and h.fp ~= ARGV[2]) then
  return {'reused', h.tool, h.fp}
end
if h.state == 'c' then
  return {'completed', fmt(now), flat}
end
if h.state == 'a' then
  -- Not yet approved, or approved for other arguments (a natural key does
  -- not check them): only the approved arguments ever run under it.
  if h[APPROVAL] == nil or h.fp ~= ARGV[2] then
    return {'awaiting', fmt(now), flat}
  end
  -- Approved: this claim owns the key and runs the call under the recorded
  -- approval, keeping the steps. Nothing ran before, so no takeover; the
  -- record is in flight again, so it no longer lapses.
  local fence = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'state', 'f', 'fence', fmt(fence), 'lease', fmt(lease_until))
  redis.call('HDEL', KEYS[1], 'req', 'exp', 'msg')
  redis.call('PERSIST', KEYS[1])
  set_worker(ARGV[5], ARGV[6])
  return {'approved', fmt(fence), fmt(lease_until), flat}
end
if tonumber(h.lease) > now then
  return {'in_flight', h.fence, h.lease}
end
-- The owner's lease ran out: take over, keeping its steps.
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'fence', fmt(fence), 'lease', fmt(lease_until))
set_worker(ARGV[5], ARGV[6])
return {'taken_over', fmt(fence), fmt(lease_until), h.fence, flat}
