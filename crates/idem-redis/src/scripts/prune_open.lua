-- prune_open: KEYS[1] the open set of one slot. ARGV: the prefix of its
-- record keys (PREFIX:{SLOT}:r:), then either 'keys' and the members to
-- check, or 'walk', the rank to start at and how many members to check.
-- Drops from the set the keys whose records are gone (Redis deleted them
-- as they lapsed), lapsed or settled; leaves corrupt ones.
-- Returns how many were dropped and, walking, the rank to go on from (-1
-- after the set's last member).
local now = now_ms()
local dropped = 0
if ARGV[2] == 'keys' then
  for i = 3, #ARGV do
    dropped = dropped + check_open(KEYS[1], ARGV[1] .. ARGV[i], ARGV[i], now)
  end
  return {dropped, -1}
end
local start, batch = tonumber(ARGV[3]), tonumber(ARGV[4])
local members = redis.call('ZRANGE', KEYS[1], start, start + batch - 1)
for _, member in ipairs(members) do
  dropped = dropped + check_open(KEYS[1], ARGV[1] .. member, member, now)
end
if #members < batch then
  return {dropped, -1}
end
return {dropped, start + #members - dropped}
