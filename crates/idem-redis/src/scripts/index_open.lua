-- index_open: KEYS[1] the index of one slot, KEYS[2] its open set.
-- ARGV: the prefix of its record keys (PREFIX:{SLOT}:r:), the member of the
-- index to start after ('' from the start), how many members to look at.
-- Migrating data of schema version 3, which kept no open sets: puts each
-- open record of the next members of the index in the open set.
-- Returns the last member looked at, or '' after the slot's last.
local now = now_ms()
return walk_index(function(key, member)
  check_open(KEYS[2], key, member, now)
end)
