-- Shared by every idem script (prepended to each). A record is a hash:
--   tool, fp, created, fence      always
--   state                         'f' in flight | 'a' awaiting approval |
--                                 'c' completed
--   lease                         in flight: the owner's lease
--   req, exp, msg                 awaiting approval: when it was asked for,
--                                 when the request lapses, what the policy
--                                 said
--   outcome, done, exp            completed: the outcome JSON, when, and
--                                 when the record lapses
--   s:<step>                      a step's result JSON (s:idem:approval is
--                                 the approval of a call awaiting one)
--   info                          the call's details (CallInfo JSON), absent
--                                 when nothing is known
--   worker                        the worker that holds or last held the key
--   audit                         operator actions (AuditEntry JSON array),
--                                 absent when none
-- info, worker, audit and the state 'a' came with schema version 2; a record
-- written by version 1 simply lacks them.
-- Times are the server's clock in milliseconds; retention (exp) is also the
-- key's TTL, the lease is a field only.
--
-- Each slot also keeps an index, PREFIX:{SLOT}:keys: a sorted set (every
-- score 0, so ordered by member) of the keys of its records, which scans
-- page through. A claim that creates a record and a replace add the key; a
-- release and a replace that deletes remove it. A record that lapses is
-- deleted by Redis, which leaves its key in the index: claims that create a
-- record drop such keys next to theirs (see `index`), scans skip them.
--
-- And (schema version 4) PREFIX:{SLOT}:open: a sorted set of the keys of
-- its *open* records (in flight, awaiting approval, completed with an
-- unknown outcome), each scored by its record's `created`, which
-- `scan_open` pages through newest first. A claim that creates a record, a
-- completion with an unknown outcome and a replace writing an open record
-- add the key; a completion with a success or failure, a release and a
-- replace writing a settled record or deleting remove it. A record Redis
-- deletes itself (an approval request or an unknown outcome that lapsed)
-- leaves its key behind: readers and the sweep drop such keys
-- (`open.lua`).

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%d', n)
end

-- The step under which an approval is recorded.
local APPROVAL = 's:idem:approval'

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
  elseif h.state == 'a' then
    if not tonumber(h.req) or not tonumber(h.exp) or not h.msg then
      return 'a record awaiting approval lacks req, exp or msg'
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

-- Completed records and approval requests lapse; in-flight ones never do.
local function expired(h, now)
  return (h.state == 'c' or h.state == 'a') and tonumber(h.exp) <= now
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

-- The rejection of a writer whose fence or expected state does not match
-- the live record `h`.
local function stale(h)
  if h == nil then
    return {'stale', 'nobody'}
  elseif h.state == 'f' then
    return {'stale', 'in_flight', h.fence}
  elseif h.state == 'a' then
    return {'stale', 'awaiting_approval', h.fence}
  end
  return {'stale', 'completed', h.fence}
end

-- The record of KEYS[1] if it is in flight under `fence`; otherwise nil and
-- the rejection to return.
local function owned(fence, now)
  local h, _, rejection = load_live(now)
  if rejection then
    return nil, rejection
  end
  if h == nil or h.state ~= 'f' or h.fence ~= fence then
    return nil, stale(h)
  end
  return h
end

-- Record the claiming worker on KEYS[1]: `given` is '1' with the worker's
-- name in `worker`, '0' for none.
local function set_worker(given, worker)
  if given == '1' then
    redis.call('HSET', KEYS[1], 'worker', worker)
  else
    redis.call('HDEL', KEYS[1], 'worker')
  end
end

-- Keep `member` in the slot's open set `set` (scored by its record's
-- creation, `created`) while `open`, and out of it once its record settles.
local function mark_open(set, member, open, created)
  if open then
    redis.call('ZADD', set, created, member)
  else
    redis.call('ZREM', set, member)
  end
end

-- How many keys after a new one a claim looks at to drop lapsed records
-- from the index: with k, at most about 1/k of the index is lapsed keys.
local INDEX_PROBES = 4

-- Add `member`, the key of the record KEYS[1], to the slot's index `idx`,
-- and drop from it the next few keys whose records are gone (they lapsed
-- and Redis deleted them). Their record keys share the slot's hash tag.
local function index(idx, member)
  redis.call('ZADD', idx, 0, member)
  local base = string.sub(KEYS[1], 1, #KEYS[1] - #member)
  local after = redis.call('ZRANGEBYLEX', idx, '(' .. member, '+', 'LIMIT', 0, INDEX_PROBES)
  for _, other in ipairs(after) do
    if redis.call('EXISTS', base .. other) == 0 then
      redis.call('ZREM', idx, other)
    end
  end
end
