/**
 * What every Lua script of the Redis batch-job backend shares: the argument convention
 * (`ARGV = [prefix, now (ms since the epoch), group, ...]`, no KEYS; key names follow
 * `redis-job-keys.ts`) and the helpers that keep results exactly-once and batch endings in one
 * place. Text only: running scripts is `redis-job-connection.ts`'s job.
 */

import { createHash } from 'node:crypto';

/** A script and the SHA-1 `EVALSHA` knows it by. */
export interface LuaScript {
  readonly name: string;
  readonly src: string;
  readonly sha: string;
}

/** Shared prologue: arguments, key names and the helpers several scripts use. */
const LIB = `
local p = ARGV[1]
local now = tonumber(ARGV[2])
local nowS = math.floor(now / 1000)
local group = ARGV[3]
local Q = p .. 'queue'
local LEASES = p .. 'leases'
local INFLIGHT = p .. 'inflight'
local RETRIES = p .. 'retries'
local ACTIVE = p .. 'active'
local TERMINAL = { failed = true, completed = true, expired = true, cancelled = true }

local function str(n) return string.format('%d', n) end
local function bkey(b) return p .. 'batch:' .. b end

local function ensureGroup()
  redis.pcall('XGROUP', 'CREATE', Q, group, '0', 'MKSTREAM')
end

-- Acks and deletes a stream entry nobody needs again.
local function dropEntry(e)
  redis.call('XACK', Q, group, e)
  redis.call('XDEL', Q, e)
end

-- Forgets an item's lease and the entry it was delivered in, if it has one.
local function dropLease(itemId)
  local raw = redis.call('HGET', INFLIGHT, itemId)
  if raw then
    dropEntry(cjson.decode(raw).e)
    redis.call('HDEL', INFLIGHT, itemId)
  end
  redis.call('ZREM', LEASES, itemId)
end

-- Moves a batch whose items all have a result to a terminal status, registering an output file
-- when some item completed and an error file when some failed. File ids derive from the batch id
-- and a fresh sequence number (scripts have no randomness of their own).
local function finishBatch(b, status)
  local k = bkey(b)
  local f = redis.call('HMGET', k, 'owner', 'completed', 'failed')
  local owner = f[1]
  local fields = { 'status', status, status .. '_at', str(nowS) }
  local function addFile(kind, count)
    if tonumber(count or '0') == 0 then return end
    local seq = redis.call('INCR', p .. 'seq')
    local id = 'file-' .. string.sub(redis.sha1hex(b .. '/' .. kind .. '/' .. seq), 1, 24)
    redis.call('HSET', p .. 'file:' .. id, 'id', id, 'owner', owner, 'seq', seq, 'purpose', 'batch_output',
      'filename', b .. '_' .. kind .. '.jsonl', 'created_at', str(nowS), 'kind', kind, 'batch_id', b)
    redis.call('ZADD', p .. 'files:' .. owner, seq, id)
    fields[#fields + 1] = kind .. '_file_id'
    fields[#fields + 1] = id
  end
  addFile('output', f[2])
  addFile('error', f[3])
  redis.call('HSET', k, unpack(fields))
  redis.call('HDEL', k, 'ending')
  redis.call('ZREM', ACTIVE, b)
end

-- Writes an item's result unless it has one; false when it had. outcome: completed | failed.
local function writeResult(b, index, itemId, outcome, result)
  if redis.call('HSETNX', p .. 'results:' .. b, index, result) == 0 then return false end
  redis.call('HINCRBY', bkey(b), outcome, 1)
  dropLease(itemId)
  redis.call('ZREM', RETRIES, b .. ' ' .. index)
  return true
end

-- After a new result: the last result of a running batch moves it to finalizing ('last'); the
-- last one of a cancelling batch ends it. An expiring batch is ended by its sweep instead.
local function afterResult(b)
  local k = bkey(b)
  local f = redis.call('HMGET', k, 'status', 'total', 'completed', 'failed', 'ending')
  if f[5] or tonumber(f[3]) + tonumber(f[4]) ~= tonumber(f[2]) then return 'recorded' end
  if f[1] == 'in_progress' then
    redis.call('HSET', k, 'status', 'finalizing', 'finalizing_at', str(nowS))
    return 'last'
  end
  if f[1] == 'cancelling' then finishBatch(b, 'cancelled') end
  return 'recorded'
end
`;

/** A script made of the shared prologue and `body`. */
export function defineLuaScript(name: string, body: string): LuaScript {
  const src = LIB + body;
  return { name, src, sha: createHash('sha1').update(src).digest('hex') };
}
