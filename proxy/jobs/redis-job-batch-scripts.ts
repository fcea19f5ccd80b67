/**
 * Lua scripts of the client side of the Redis batch-job backend and of batch endings: store a file,
 * delete one, commit and feed a batch, cancel, expire, fail what is left and end a batch. Each is
 * atomic on the server; this module only holds their text.
 */

import { defineLuaScript as script } from './redis-job-lua.js';

/** ARGV 4..: id, owner, filename, bytes, created_at (s), content. Returns the sequence number. */
export const CREATE_FILE = script(
  'create-file',
  `
local id = ARGV[4]
local seq = redis.call('INCR', p .. 'seq')
redis.call('HSET', p .. 'file:' .. id, 'id', id, 'owner', ARGV[5], 'seq', seq, 'purpose', 'batch',
  'filename', ARGV[6], 'bytes', ARGV[7], 'created_at', ARGV[8], 'kind', 'upload', 'content', ARGV[9])
redis.call('ZADD', p .. 'files:' .. ARGV[5], seq, id)
return seq
`,
);

/**
 * ARGV 4..: id, owner, tombstone TTL ms. Deletes a file of `owner`; an upload only while no batch
 * that is not terminal reads it. Its place in the owner's list stays in `file-gone:{id}` for the
 * TTL, for a list cursor that names it. Returns `{'ok'}`, `{'missing'}` or `{'busy', batch id, status}`.
 */
export const DELETE_FILE = script(
  'delete-file',
  `
local id, owner, goneTtl = ARGV[4], ARGV[5], ARGV[6]
local fk = p .. 'file:' .. id
local f = redis.call('HMGET', fk, 'owner', 'kind')
if f[1] ~= owner then return { 'missing' } end
local readers = p .. 'file-readers:' .. id
if f[2] == 'upload' then
  for _, b in ipairs(redis.call('SMEMBERS', readers)) do
    local st = redis.call('HGET', bkey(b), 'status')
    if st and not TERMINAL[st] then return { 'busy', b, st } end
  end
end
local seq = redis.call('ZSCORE', p .. 'files:' .. owner, id)
redis.call('DEL', fk, readers)
redis.call('ZREM', p .. 'files:' .. owner, id)
if seq then
  local gone = p .. 'file-gone:' .. id
  redis.call('HSET', gone, 'owner', owner, 'seq', seq)
  redis.call('PEXPIRE', gone, goneTtl)
end
return { 'ok' }
`,
);

/**
 * ARGV 4..: batch id, owner, input file id, total, status, then field/value pairs of the batch
 * hash. Makes a batch visible once its items (written beforehand under a TTL) are all there.
 * Returns 'ok', 'nofile' (the upload went meanwhile) or 'incomplete'.
 */
export const COMMIT_BATCH = script(
  'commit-batch',
  `
local b, owner, fileId, total, status = ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8]
local f = redis.call('HMGET', p .. 'file:' .. fileId, 'owner', 'kind')
if f[1] ~= owner or f[2] ~= 'upload' then return 'nofile' end
local items, cids = p .. 'items:' .. b, p .. 'cids:' .. b
if status ~= 'failed' and (redis.call('HLEN', items) ~= total or redis.call('HLEN', cids) ~= total) then
  return 'incomplete'
end
local seq = redis.call('INCR', p .. 'seq')
local last = redis.call('INCRBY', p .. 'item-seq', total)
local fields = { 'id', b, 'owner', owner, 'seq', seq, 'input_file_id', fileId, 'status', status,
  'total', total, 'completed', 0, 'failed', 0, 'first_item', last - total + 1, 'queued', 0 }
for i = 9, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', bkey(b), unpack(fields))
redis.call('ZADD', p .. 'batches:' .. owner, seq, b)
if status ~= 'failed' then
  redis.call('ZADD', ACTIVE, seq, b)
  redis.call('SADD', p .. 'file-readers:' .. fileId, b)
  redis.call('PERSIST', items)
  redis.call('PERSIST', cids)
end
return 'ok'
`,
);

/**
 * ARGV 4..: batch id, from, to. Appends items [from, to) to the queue if `queued` is still
 * `from` (a resumed feed never adds an item twice). Returns the new `queued`, or the current one
 * when it was not `from`.
 */
export const FEED = script(
  'feed',
  `
local b, from, to = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local k = bkey(b)
local f = redis.call('HMGET', k, 'queued', 'total', 'status')
if not f[1] or tonumber(f[1]) ~= from then return tonumber(f[1] or '-1') end
to = math.min(to, tonumber(f[2]))
-- A batch that no longer runs needs no entries (claim would only drop them).
if not TERMINAL[f[3]] and f[3] ~= 'cancelling' then
  ensureGroup()
  for i = from, to - 1 do redis.call('XADD', Q, '*', 'b', b, 'i', str(i)) end
end
redis.call('HSET', k, 'queued', str(to))
return to
`,
);

/**
 * ARGV 4..: batch id, owner. Starts a cancel. Returns 'ok' (now cancelling), 'missing', or the
 * status that forbids it ('cancelling' means already under way).
 */
export const CANCEL = script(
  'cancel',
  `
local b, owner = ARGV[4], ARGV[5]
local k = bkey(b)
local f = redis.call('HMGET', k, 'owner', 'status', 'ending')
if f[1] ~= owner then return 'missing' end
if f[3] then return f[3] end
if f[2] ~= 'validating' and f[2] ~= 'in_progress' then return f[2] end
redis.call('HSET', k, 'status', 'cancelling', 'cancelling_at', str(nowS))
return 'ok'
`,
);

/**
 * ARGV 4..: batch id. Marks an overdue running batch as expiring (internal field `ending`): from
 * then on it hands out no item and keeps no late result. Returns 1 when the batch is expiring.
 */
export const EXPIRE = script(
  'expire',
  `
local k = bkey(ARGV[4])
local f = redis.call('HMGET', k, 'status', 'ending', 'expires_at')
if f[2] == 'expired' then return 1 end
if (f[1] == 'validating' or f[1] == 'in_progress') and not f[2] and tonumber(f[3]) <= nowS then
  redis.call('HSET', k, 'ending', 'expired')
  return 1
end
return 0
`,
);

/**
 * ARGV 4..: batch id, from, to, mode, error code, message. Fails items [from, to) that have no
 * result: mode `cancel` (batch cancelling) spares items under a live lease, mode `expire` (batch
 * expiring) takes them too. Returns how many it failed, -1 when the batch is not in that state.
 */
export const FAIL_RANGE = script(
  'fail-range',
  `
local b, from, to, mode = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local k = bkey(b)
local f = redis.call('HMGET', k, 'status', 'ending', 'first_item', 'total')
if mode == 'cancel' and f[1] ~= 'cancelling' then return -1 end
if mode == 'expire' and (f[2] ~= 'expired' or TERMINAL[f[1]]) then return -1 end
local first = tonumber(f[3])
to = math.min(to, tonumber(f[4]))
local result = cjson.encode({ o = 'failed', c = ARGV[8], m = ARGV[9] })
local results = p .. 'results:' .. b
local n = 0
for i = from, to - 1 do
  local itemId = str(first + i)
  local live = false
  if mode == 'cancel' then live = tonumber(redis.call('ZSCORE', LEASES, itemId) or '0') > now end
  if not live and redis.call('HSETNX', results, str(i), result) == 1 then
    n = n + 1
    dropLease(itemId)
    redis.call('ZREM', RETRIES, b .. ' ' .. str(i))
  end
end
if n > 0 then redis.call('HINCRBY', k, 'failed', n) end
return n
`,
);

/**
 * ARGV 4..: batch id, mode. Ends a batch whose items all have a result: `cancel` (cancelling ->
 * cancelled), `expire` (expiring -> expired), `finalize` (finalizing -> completed, whatever the
 * counts). Returns 1 when it ended the batch.
 */
export const END_BATCH = script(
  'end-batch',
  `
local b, mode = ARGV[4], ARGV[5]
local f = redis.call('HMGET', bkey(b), 'status', 'ending', 'total', 'completed', 'failed')
if not f[1] or TERMINAL[f[1]] then return 0 end
if mode == 'finalize' then
  if f[1] ~= 'finalizing' then return 0 end
  finishBatch(b, 'completed')
  return 1
end
if tonumber(f[4]) + tonumber(f[5]) ~= tonumber(f[3]) then return 0 end
if mode == 'cancel' and f[1] == 'cancelling' then
  finishBatch(b, 'cancelled')
  return 1
end
if mode == 'expire' and f[2] == 'expired' then
  finishBatch(b, 'expired')
  return 1
end
return 0
`,
);

/** ARGV 4..: file id, bytes. Keeps the measured size of an output or error file that still exists. */
export const FILE_BYTES = script(
  'file-bytes',
  `
local fk = p .. 'file:' .. ARGV[4]
if redis.call('EXISTS', fk) == 0 then return 0 end
redis.call('HSET', fk, 'bytes', ARGV[5])
return 1
`,
);
