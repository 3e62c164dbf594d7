-- checkpoint: KEYS[1] record. ARGV: fence, step, step value JSON, lease ms.
local now = now_ms()
local h, rejection = owned(ARGV[1], now)
if h == nil then
  return rejection
end
redis.call('HSET', KEYS[1], 's:' .. ARGV[2], ARGV[3], 'lease', fmt(now + tonumber(ARGV[4])))
return {'ok'}
