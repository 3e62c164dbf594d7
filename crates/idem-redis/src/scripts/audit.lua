-- The audit log of a slot (prepended, after common.lua, to the scripts that
-- append to it): a stream, PREFIX:{SLOT}:audit, of entries with fields
--   seq     the event's number, from the counter PREFIX:{SLOT}:audit_seq
--   key     the key the event is about
--   event   the event (AuditEvent JSON, without its seq)
-- An entry's id is `at-N`, the event's own time, unless an event of a
-- later time is already in the stream (then the server picks the id, past
-- the last one): the stream stays in the order of the events' times, which
-- reads and the retention (XTRIM MINID) go by.

-- Append the event of `key` at `at` (milliseconds) with text `event`;
-- returns its seq.
local function append_audit(stream, counter, at, key, event)
  local seq = fmt(redis.call('INCR', counter))
  local id = redis.pcall('XADD', stream, at .. '-*', 'seq', seq, 'key', key, 'event', event)
  if type(id) == 'table' and id.err then
    redis.call('XADD', stream, '*', 'seq', seq, 'key', key, 'event', event)
  end
  return seq
end
