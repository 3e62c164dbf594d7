-- complete: KEYS[1] record. ARGV: fence, outcome JSON, ttl ms, channel, key.
local now = now_ms()
local h, rejection = owned(ARGV[1], now)
if h == nil then
  return rejection
end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'state', 'c', 'outcome', ARGV[2], 'done', fmt(now), 'exp', fmt(exp))
redis.call('HDEL', KEYS[1], 'lease')
redis.call('PEXPIREAT', KEYS[1], exp)
redis.call('PUBLISH', ARGV[4], ARGV[5])
return {'ok'}
