-- replace: KEYS[1] record, KEYS[2] the fence counter of its slot, KEYS[3]
-- the index of its slot, KEYS[4] its open set.
-- ARGV: expected fence, expected state ('f' in flight, 'l' in flight with
-- its lease run out, 'a' awaiting approval, 'c' completed), channel, key,
-- '1' when the new record is open (in flight, awaiting approval, an
-- unknown outcome) else '0', then the new record's fields and values
-- (without its fence), or nothing to delete the record.
-- With an audit event, KEYS[5] and KEYS[6] are the slot's audit stream and
-- counter, and ARGV[6], ARGV[7] the event's time and text, before the
-- fields: the event is appended exactly when the swap happens. The reply
-- is {'ok', fence ('0' for a deletion), the millisecond of the event's
-- entry id (or '')}.
local first = 6
if #KEYS == 6 then
  first = 8
end
local audit_ms = ''
local function audited()
  if first == 8 then
    local _
    _, audit_ms = append_audit(KEYS[5], KEYS[6], ARGV[6], ARGV[4], ARGV[7])
  end
end
local now = now_ms()
local h, _, rejection = load_live(now)
if rejection then
  return rejection
end
local want = ARGV[2]
local matches = h ~= nil and h.fence == ARGV[1] and (
  (want == 'f' and h.state == 'f')
  or (want == 'l' and h.state == 'f' and tonumber(h.lease) <= now)
  or (want == 'a' and h.state == 'a')
  or (want == 'c' and h.state == 'c'))
if not matches then
  return stale(h)
end
if #ARGV == first - 1 then
  audited()
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[3], ARGV[4])
  redis.call('ZREM', KEYS[4], ARGV[4])
  redis.call('PUBLISH', ARGV[3], ARGV[4])
  return {'ok', '0', audit_ms}
end
local new = {fence = '0'}
for i = first, #ARGV, 2 do
  new[ARGV[i]] = ARGV[i + 1]
end
local bad = corrupt(new)
if bad then
  -- Never write what no reader could trust.
  return {'invalid', bad}
end
audited()
local fence = fmt(redis.call('INCR', KEYS[2]))
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'fence', fence)
for i = first, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
if new.state ~= 'f' then
  redis.call('PEXPIREAT', KEYS[1], new.exp)
end
redis.call('ZADD', KEYS[3], 0, ARGV[4])
mark_open(KEYS[4], ARGV[4], ARGV[5] == '1', new.created)
redis.call('PUBLISH', ARGV[3], ARGV[4])
return {'ok', fence, audit_ms}
