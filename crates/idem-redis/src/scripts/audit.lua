-- The audit log of a slot (prepended, after common.lua, to the scripts that
-- append to it): a stream, PREFIX:{SLOT}:audit, of entries with fields
--   seq     the event's number, from the counter PREFIX:{SLOT}:audit_seq
--   key     the key the event is about
--   event   the event (AuditEvent JSON, without its seq)
-- An entry's id is `at-N`, the event's own time, unless an event of a
-- later time is already in the stream: then it goes just past the stream's
-- last id, in that id's millisecond (never the server's clock's: the index
-- of which slots hold events of which minute, PREFIX:{audit}:slots, was
-- told of that millisecond when its event came). The stream stays in the
-- order of the events' times, which reads and the retention (XTRIM MINID)
-- go by.

-- The id of the last entry ever added to `stream`.
local function last_id(stream)
  local info = redis.call('XINFO', 'STREAM', stream)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      return info[i + 1]
    end
  end
end

-- Append the event of `key` at `at` (milliseconds) with text `event`;
-- returns its seq and the millisecond of its id.
local function append_audit(stream, counter, at, key, event)
  local seq = fmt(redis.call('INCR', counter))
  local id = redis.pcall('XADD', stream, at .. '-*', 'seq', seq, 'key', key, 'event', event)
  if type(id) == 'table' and id.err then
    local ms, n = string.match(last_id(stream), '^(%d+)-(%d+)$')
    redis.call('XADD', stream, ms .. '-' .. fmt(tonumber(n) + 1), 'seq', seq, 'key', key, 'event', event)
    return seq, ms
  end
  return seq, at
end
