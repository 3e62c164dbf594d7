-- renew: KEYS[1] record. ARGV: fence, lease ms.
local now = now_ms()
local h, rejection = owned(ARGV[1], now)
if h == nil then
  return rejection
end
redis.call('HSET', KEYS[1], 'lease', fmt(now + tonumber(ARGV[2])))
return {'ok'}
