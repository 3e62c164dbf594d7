-- release: KEYS[1] record. ARGV: fence, channel, key.
local now = now_ms()
local h, rejection = owned(ARGV[1], now)
if h == nil then
  return rejection
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {'ok'}
