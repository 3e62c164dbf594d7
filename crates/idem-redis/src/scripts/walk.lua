-- walk_index: the walk of the migrations through one slot's index, a batch
-- of members at a time. KEYS[1] the index; ARGV: the prefix of its record
-- keys (PREFIX:{SLOT}:r:), the member to start after ('' from the start),
-- how many members to look at. Calls visit(key, member) for each member
-- of the batch, and returns the last member looked at, or '' after the
-- slot's last.
local function walk_index(visit)
  local from = '-'
  if ARGV[2] ~= '' then
    from = '(' .. ARGV[2]
  end
  local batch = tonumber(ARGV[3])
  local members = redis.call('ZRANGEBYLEX', KEYS[1], from, '+', 'LIMIT', 0, batch)
  for _, member in ipairs(members) do
    visit(ARGV[1] .. member, member)
  end
  if #members < batch then
    return ''
  end
  return members[#members]
end
