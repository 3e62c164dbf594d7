-- index_open: KEYS[1] the index of one slot, KEYS[2] its open set.
-- ARGV: the prefix of its record keys (PREFIX:{SLOT}:r:), the member of the
-- index to start after ('' from the start), how many members to look at.
-- Migrating data of schema version 3, which kept no open sets: puts each
-- open record of the next members of the index in the open set.
-- Returns the last member looked at, or '' after the slot's last.
local now = now_ms()
local from = '-'
if ARGV[2] ~= '' then
  from = '(' .. ARGV[2]
end
local batch = tonumber(ARGV[3])
local members = redis.call('ZRANGEBYLEX', KEYS[1], from, '+', 'LIMIT', 0, batch)
for _, member in ipairs(members) do
  check_open(KEYS[2], ARGV[1] .. member, member, now)
end
if #members < batch then
  return ''
end
return members[#members]
