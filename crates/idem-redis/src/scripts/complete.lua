-- complete: KEYS[1] record, KEYS[2] the open set of its slot. ARGV: fence,
-- outcome JSON, ttl ms, channel, key, '1' when the outcome is unknown (the
-- record stays open) else '0'.
local now = now_ms()
local h, rejection = owned(ARGV[1], now)
if h == nil then
  return rejection
end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'state', 'c', 'outcome', ARGV[2], 'done', fmt(now), 'exp', fmt(exp))
redis.call('HDEL', KEYS[1], 'lease')
redis.call('PEXPIREAT', KEYS[1], exp)
mark_open(KEYS[2], ARGV[5], ARGV[6] == '1', h.created)
redis.call('PUBLISH', ARGV[4], ARGV[5])
return {'ok'}
