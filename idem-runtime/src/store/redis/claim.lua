-- claim: KEYS[1] record, KEYS[2] the fence counter of its slot.
-- ARGV: tool, fingerprint, check fingerprint ('1'/'0'), lease ms.
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
  return {'acquired', fmt(fence), fmt(lease_until)}
end
if h.tool ~= ARGV[1] or (ARGV[3] == '1' and h.fp ~= ARGV[2]) then
  return {'reused', h.tool, h.fp}
end
if h.state == 'c' then
  return {'completed', fmt(now), flat}
end
if tonumber(h.lease) > now then
  return {'in_flight', h.fence, h.lease}
end
-- The owner's lease ran out: take over, keeping its steps.
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'fence', fmt(fence), 'lease', fmt(lease_until))
return {'taken_over', fmt(fence), fmt(lease_until), h.fence, flat}
