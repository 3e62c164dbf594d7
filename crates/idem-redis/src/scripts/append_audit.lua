-- append_audit: KEYS[1] a record of the slot (unused: it names the slot),
-- KEYS[2] the slot's audit stream, KEYS[3] its audit counter.
-- ARGV: the event's time (ms), its key, its text.
-- Returns the seq and the millisecond of the entry's id.
local seq, ms = append_audit(KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
return {'ok', seq, ms}
