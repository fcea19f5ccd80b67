/**
 * Lua scripts of the worker side of the Redis batch-job backend: claim (retries due, expired
 * leases, new stream entries), record a result exactly once, give an item back (for a retry, or
 * from a claim whose caller gave up), fail poisoned items, count the backlog, prune idle
 * consumers. Each is atomic on the server; this module only holds their text.
 */

import { defineLuaScript as script } from './redis-job-lua.js';

/**
 * ARGV 4..: worker id, max, lease ms. Requeues due retries, then leases expired leases (XCLAIM),
 * then new entries (XREADGROUP), up to max; entries of batches that no longer run are acked and
 * dropped. Returns `[[item id, batch, index, attempts, owner, custom_id, item JSON, host, headers], ...]`
 * (host and headers nil for a batch stored without them).
 */
export const CLAIM = script(
  'claim',
  `
local worker, max, leaseMs = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local out = {}

local due = redis.call('ZRANGEBYSCORE', RETRIES, '-inf', str(now), 'LIMIT', 0, 1000)
if #due > 0 then
  ensureGroup()
  for _, m in ipairs(due) do
    local sp = string.find(m, ' ', 1, true)
    redis.call('XADD', Q, '*', 'b', string.sub(m, 1, sp - 1), 'i', string.sub(m, sp + 1))
    redis.call('ZREM', RETRIES, m)
  end
end

local function lease(b, index, e)
  local k = bkey(b)
  local f = redis.call('HMGET', k, 'status', 'ending', 'first_item', 'owner', 'host', 'headers')
  if not f[1] then
    dropEntry(e)
    return
  end
  local itemId = str(tonumber(f[3]) + tonumber(index))
  if (f[1] ~= 'validating' and f[1] ~= 'in_progress') or f[2]
    or redis.call('HEXISTS', p .. 'results:' .. b, index) == 1 then
    dropLease(itemId)
    dropEntry(e)
    return
  end
  local held = redis.call('HGET', INFLIGHT, itemId)
  if held then
    local old = cjson.decode(held).e
    if old ~= e then dropEntry(old) end
  end
  if f[1] == 'validating' then redis.call('HSET', k, 'status', 'in_progress', 'in_progress_at', str(nowS)) end
  local attempts = redis.call('HINCRBY', p .. 'attempts:' .. b, index, 1)
  redis.call('HSET', INFLIGHT, itemId, cjson.encode({ e = e, w = worker, b = b, i = index }))
  redis.call('ZADD', LEASES, str(now + leaseMs), itemId)
  out[#out + 1] = { itemId, b, index, attempts, f[4],
    redis.call('HGET', p .. 'cids:' .. b, index), redis.call('HGET', p .. 'items:' .. b, index), f[5], f[6] }
end

if max > 0 then
  for _, itemId in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', str(now), 'LIMIT', 0, max)) do
    local raw = redis.call('HGET', INFLIGHT, itemId)
    if not raw then
      redis.call('ZREM', LEASES, itemId)
    else
      local l = cjson.decode(raw)
      if #redis.call('XCLAIM', Q, group, worker, 0, l.e, 'JUSTID') == 1 then
        lease(l.b, l.i, l.e)
      else
        -- The entry left the pending list (trimmed by hand, or its consumer deleted): queue the item again.
        redis.call('HDEL', INFLIGHT, itemId)
        redis.call('ZREM', LEASES, itemId)
        redis.call('XDEL', Q, l.e)
        ensureGroup()
        redis.call('XADD', Q, '*', 'b', l.b, 'i', l.i)
      end
    end
  end
end

if #out < max and redis.call('EXISTS', Q) == 1 then
  ensureGroup()
  -- Entries of cancelled or expired batches are dropped as they come; a bound on how many one call
  -- reads keeps a long run of them from stalling Redis, and the next claim goes on.
  local seen = 0
  while #out < max and seen < 2000 do
    local need = max - #out
    local r = redis.call('XREADGROUP', 'GROUP', group, worker, 'COUNT', need, 'STREAMS', Q, '>')
    if not r then break end
    local entries = r[1][2]
    seen = seen + #entries
    for _, en in ipairs(entries) do
      local fv = en[2]
      local b, i
      for j = 1, #fv, 2 do
        if fv[j] == 'b' then b = fv[j + 1] elseif fv[j] == 'i' then i = fv[j + 1] end
      end
      if b and i then lease(b, i, en[1]) else dropEntry(en[1]) end
    end
    if #entries < need then break end
  end
end
return out
`,
);

/**
 * ARGV 4..: batch id, index, outcome (completed | failed), result JSON. Records a result exactly
 * once. Returns 'duplicate', 'recorded' or 'last'.
 */
export const RECORD = script(
  'record',
  `
local b, index = ARGV[4], ARGV[5]
local f = redis.call('HMGET', bkey(b), 'status', 'ending', 'first_item')
if not f[1] or TERMINAL[f[1]] or f[2] then return 'duplicate' end
if not writeResult(b, index, str(tonumber(f[3]) + tonumber(index)), ARGV[6], ARGV[7]) then return 'duplicate' end
return afterResult(b)
`,
);

/**
 * ARGV 4..: item id, worker id, delay ms. Gives the item back for a retry due in delay ms if the
 * worker still holds it. Returns 1 when it did, 0 when not.
 */
export const RETRY_LATER = script(
  'retry-later',
  `
local itemId, worker, delay = ARGV[4], ARGV[5], tonumber(ARGV[6])
local raw = redis.call('HGET', INFLIGHT, itemId)
if not raw then return 0 end
local l = cjson.decode(raw)
if l.w ~= worker then return 0 end
dropLease(itemId)
redis.call('ZADD', RETRIES, str(now + delay), l.b .. ' ' .. l.i)
return 1
`,
);

/**
 * ARGV 4..: item id, worker id, attempts. Gives back an item whose claim reply came after the worker
 * had given up on it (so it never ran): if the worker still holds it from that claim (its attempts
 * are still those the claim counted), the lease is dropped, that attempt uncounted and the item is
 * due again at once. Returns 1 when it did, 0 when not.
 */
export const UNCLAIM = script(
  'unclaim',
  `
local itemId, worker, attempts = ARGV[4], ARGV[5], ARGV[6]
local raw = redis.call('HGET', INFLIGHT, itemId)
if not raw then return 0 end
local l = cjson.decode(raw)
local ak = p .. 'attempts:' .. l.b
if l.w ~= worker or redis.call('HGET', ak, l.i) ~= attempts then return 0 end
dropLease(itemId)
redis.call('HINCRBY', ak, l.i, -1)
redis.call('ZADD', RETRIES, str(now), l.b .. ' ' .. l.i)
return 1
`,
);

/**
 * ARGV 4..: max attempts. Fails items whose lease expired after max attempts in running batches
 * (`max_attempts_exceeded`; in a cancelling batch the cancel takes them). Returns how many.
 */
export const POISON = script(
  'poison',
  `
local max = tonumber(ARGV[4])
local n = 0
local result = cjson.encode({ o = 'failed', c = 'max_attempts_exceeded', m = 'no result after ' .. ARGV[4] .. ' attempts' })
for _, itemId in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', str(now), 'LIMIT', 0, 1000)) do
  local raw = redis.call('HGET', INFLIGHT, itemId)
  if not raw then
    redis.call('ZREM', LEASES, itemId)
  else
    local l = cjson.decode(raw)
    local f = redis.call('HMGET', bkey(l.b), 'status', 'ending')
    local attempts = tonumber(redis.call('HGET', p .. 'attempts:' .. l.b, l.i) or '0')
    if f[1] == 'in_progress' and not f[2] and attempts >= max then
      if writeResult(l.b, l.i, itemId, 'failed', result) then
        afterResult(l.b)
        n = n + 1
      end
    end
  end
end
return n
`,
);

/** No ARGV beyond the prologue. Items without a result across batches that are not terminal. */
export const BACKLOG = script(
  'backlog',
  `
local n = 0
for _, b in ipairs(redis.call('ZRANGE', ACTIVE, 0, -1)) do
  local f = redis.call('HMGET', bkey(b), 'total', 'completed', 'failed')
  if f[1] then n = n + tonumber(f[1]) - tonumber(f[2]) - tonumber(f[3]) end
end
return n
`,
);

/**
 * ARGV 4..: idle ms. Deletes consumers of the group with nothing pending that have been idle that
 * long (each worker id is a consumer; restarted workers leave old ones behind). Returns how many.
 */
export const PRUNE_CONSUMERS = script(
  'prune-consumers',
  `
if redis.call('EXISTS', Q) == 0 then return 0 end
local list = redis.pcall('XINFO', 'CONSUMERS', Q, group)
if type(list) ~= 'table' or list.err then return 0 end
local idleMs = tonumber(ARGV[4])
local n = 0
for _, c in ipairs(list) do
  local name, pending, idle
  for j = 1, #c, 2 do
    if c[j] == 'name' then name = c[j + 1]
    elseif c[j] == 'pending' then pending = c[j + 1]
    elseif c[j] == 'idle' then idle = c[j + 1] end
  end
  if name and pending == 0 and idle and idle >= idleMs then
    redis.call('XGROUP', 'DELCONSUMER', Q, group, name)
    n = n + 1
  end
end
return n
`,
);
