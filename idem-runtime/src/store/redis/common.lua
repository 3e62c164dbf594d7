-- Shared by every idem script (prepended to each). A record is a hash:
--   tool, fp, created, fence, state ('f' in flight | 'c' completed),
--   lease (in flight), outcome, done, exp (completed), s:<step> (steps).
-- Times are the server's clock in milliseconds; retention is the key's TTL,
-- the lease is a field.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%d', n)
end

-- The record as a table (nil when absent) and as the flat HGETALL list.
local function load(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then
    return nil, flat
  end
  local h = {}
  for i = 1, #flat, 2 do
    h[flat[i]] = flat[i + 1]
  end
  return h, flat
end

-- Why a stored record cannot be trusted, or nil.
local function corrupt(h)
  if not h.tool or not h.fp or not tonumber(h.created) or not tonumber(h.fence) then
    return 'a field of tool, fp, created, fence is missing or malformed'
  end
  if h.state == 'f' then
    if not tonumber(h.lease) then
      return 'an in-flight record has no lease'
    end
  elseif h.state == 'c' then
    if not h.outcome or not tonumber(h.done) or not tonumber(h.exp) then
      return 'a completed record lacks outcome, done or exp'
    end
  else
    return 'unknown state'
  end
  return nil
end

local function expired(h, now)
  return h.state == 'c' and tonumber(h.exp) <= now
end

-- The record of KEYS[1] and its flat field list; the record is nil when
-- absent or expired. A corrupt record yields nil and the rejection to
-- return, so nothing is decided on it.
local function load_live(now)
  local h, flat = load(KEYS[1])
  if h == nil then
    return nil, flat
  end
  local bad = corrupt(h)
  if bad then
    return nil, flat, {'corrupt', bad}
  end
  if expired(h, now) then
    return nil, flat
  end
  return h, flat
end

-- The record of KEYS[1] if it is in flight under `fence`; otherwise nil and
-- the rejection to return.
local function owned(fence, now)
  local h, _, rejection = load_live(now)
  if rejection then
    return nil, rejection
  end
  if h == nil then
    return nil, {'stale', 'nobody'}
  end
  if h.state ~= 'f' then
    return nil, {'stale', 'completed', h.fence}
  end
  if h.fence ~= fence then
    return nil, {'stale', 'in_flight', h.fence}
  end
  return h
end
