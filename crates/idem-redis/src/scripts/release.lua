-- release: KEYS[1] record, KEYS[2] the index of its slot, KEYS[3] its open
-- set. ARGV: fence, channel, key.
local now = now_ms()
local h, rejection = owned(ARGV[1], now)
if h == nil then
  return rejection
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {'ok'}
