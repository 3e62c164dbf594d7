-- keep_unknown: KEYS[1] the index of one slot. ARGV: the prefix of its
-- record keys (PREFIX:{SLOT}:r:), the member to start after ('' from the
-- start), how many members to look at.
-- Unknown outcomes stored before idem 0.3 carry their record's retention as
-- the key's TTL, and Redis would delete them when it runs out, letting the
-- call run again. This gives each the form an unknown outcome is written in
-- now: no key TTL, and the longest retention the store writes (2^52 ms).
-- Returns the last member looked at, or '' after the slot's last.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return walk_index(function(key)
  local fields = redis.call('HMGET', key, 'state', 'outcome')
  local state, outcome = fields[1], fields[2]
  if state == 'c' and outcome and string.find(outcome, '"status":"unknown"', 1, true) then
    redis.call('PERSIST', key)
    redis.call('HSET', key, 'exp', string.format('%d', now + 4503599627370496))
  end
end)
