-- The open sets (prepended, after common.lua, to the scripts that check
-- them against the records): PREFIX:{SLOT}:open, the keys of a slot's open
-- records scored by their creation (see common.lua).

-- The fields that tell whether a record is open.
local OPEN_FIELDS = {'tool', 'fp', 'created', 'fence', 'state', 'lease', 'req', 'exp', 'msg',
  'outcome', 'done'}

-- What the record under the Redis key `key` is to the open sets at `now`:
-- its `created` when it is open (in flight, awaiting approval, completed
-- with an unknown outcome, and not lapsed); false when it is absent,
-- lapsed or settled; nil when it is corrupt (it is left as it is).
local function open_at(key, now)
  local values = redis.call('HMGET', key, unpack(OPEN_FIELDS))
  local h, any = {}, false
  for i, name in ipairs(OPEN_FIELDS) do
    if values[i] then
      h[name] = values[i]
      any = true
    end
  end
  if not any then
    return false
  end
  if corrupt(h) then
    return nil
  end
  if expired(h, now) then
    return false
  end
  if h.state == 'c' then
    local ok, outcome = pcall(cjson.decode, h.outcome)
    if not ok or type(outcome) ~= 'table' then
      return nil
    end
    if outcome.status ~= 'unknown' then
      return false
    end
  end
  return h.created
end

-- Put the key `member` of the slot's open set `set`, whose record is the
-- Redis key `key`, in the set or out of it as its record says at `now`.
-- Returns 1 when it was dropped, else 0.
local function check_open(set, key, member, now)
  local created = open_at(key, now)
  if created then
    redis.call('ZADD', set, created, member)
  elseif created == false then
    return redis.call('ZREM', set, member)
  end
  return 0
end
