/**
 * The Lua script that applies a batch of bucket operations inside Redis. Redis runs a script to
 * completion before serving any other command, so for every operation in the batch the refill,
 * check and debit of all its buckets form one atomic step, however many Sluice instances call it
 * concurrently; operations apply in batch order, as if sent one by one.
 *
 * State per bucket: a hash `{ l = level (units), t = time of the last refill (ms) }`. A missing key
 * is a full bucket. Each write sets a TTL of the time the bucket needs to refill completely (+1 s),
 * after which a missing key and the real state coincide, so idle tenants cost no memory.
 * This file also encodes a batch into the script's arguments and decodes its reply.
 */
import { createHash } from 'node:crypto';
import { TakeStatus } from './rate-limit-store.js';
import { BucketUnit, type Bucket } from './token-bucket.js';

/**
 * KEYS: the distinct bucket keys of the batch.
 * ARGV[1]: now in ms, or empty to use the server's clock (`TIME`).
 * ARGV[2k], ARGV[2k+1] for k = 1..#KEYS: capacity (units) and refill rate (units/ms) of KEYS[k].
 * Then the operation count, then per operation: kind (`t` take, `a` adjust), amount for requests
 * buckets, amount for tokens buckets (a cost for take, a signed delta for adjust), bucket count n,
 * then n pairs (index into KEYS, unit `r` or `t`).
 * Returns, per operation, its status (0 = debited, 1 = rejected and nothing written, 2 = adjusted)
 * followed by its n bucket levels as strings (Lua numbers would be truncated to integers).
 */
export const BUCKET_SCRIPT = `
if redis.replicate_commands then redis.replicate_commands() end
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
else
  now = tonumber(ARGV[1])
end
local nkeys = #KEYS
local level, last, cap, rate, dirty = {}, {}, {}, {}, {}
for k = 1, nkeys do
  cap[k] = tonumber(ARGV[2 * k])
  rate[k] = tonumber(ARGV[2 * k + 1])
  local state = redis.call('HMGET', KEYS[k], 'l', 't')
  local l = tonumber(state[1])
  local t = tonumber(state[2])
  if l == nil or t == nil then
    l = cap[k]
    t = now
  end
  if now > t then
    l = l + (now - t) * rate[k]
    t = now
  end
  if l > cap[k] then l = cap[k] end
  level[k] = l
  last[k] = t
end
local out = {}
local i = 2 * nkeys + 2
local nops = tonumber(ARGV[i])
i = i + 1
for op = 1, nops do
  local kind = ARGV[i]
  local req = tonumber(ARGV[i + 1])
  local tok = tonumber(ARGV[i + 2])
  local nb = tonumber(ARGV[i + 3])
  local first = i + 4
  local status = 2
  if kind == 't' then
    status = 0
    for b = 0, nb - 1 do
      local k = tonumber(ARGV[first + 2 * b])
      local amount = req
      if ARGV[first + 2 * b + 1] == 't' then amount = tok end
      if level[k] < amount then status = 1 end
    end
  end
  out[#out + 1] = status
  for b = 0, nb - 1 do
    local k = tonumber(ARGV[first + 2 * b])
    local amount = req
    if ARGV[first + 2 * b + 1] == 't' then amount = tok end
    if status == 0 then
      level[k] = level[k] - amount
      dirty[k] = true
    elseif status == 2 then
      level[k] = level[k] + amount
      if level[k] > cap[k] then level[k] = cap[k] end
      dirty[k] = true
    end
    out[#out + 1] = string.format('%.17g', level[k])
  end
  i = first + 2 * nb
end
for k = 1, nkeys do
  if dirty[k] then
    redis.call('HSET', KEYS[k], 'l', string.format('%.17g', level[k]), 't', string.format('%.17g', last[k]))
    redis.call('PEXPIRE', KEYS[k], string.format('%d', math.ceil((cap[k] - level[k]) / rate[k]) + 1000))
  end
end
return out
`;

/** SHA-1 of the script, as `EVALSHA` wants it. */
export const BUCKET_SCRIPT_SHA = createHash('sha1').update(BUCKET_SCRIPT).digest('hex');

/** Script status of an operation that was refused (0 = debited, 2 = adjusted). */
const STATUS_REJECTED = 1;

/** One operation of a batch: a take (costs) or an adjustment (signed deltas), and its results. */
export class BucketOp {
  /** True for a take, false for an adjustment. */
  readonly take: boolean;
  readonly buckets: readonly Bucket[];
  /** Cost (take) or delta (adjust) for requests buckets, requests. */
  readonly requests: number;
  /** Cost (take) or delta (adjust) for tokens buckets, tokens. */
  readonly tokens: number;
  /** Where the levels after the operation go (units), or null. */
  readonly levels: number[] | null;
  /** Result, set by `decodeBatch`. */
  status: TakeStatus = TakeStatus.unavailable;
  /** Completion callback, set by the store. */
  resolve: (status: TakeStatus) => void = noop;

  constructor(
    take: boolean,
    buckets: readonly Bucket[],
    requests: number,
    tokens: number,
    levels: number[] | null,
  ) {
    this.take = take;
    this.buckets = buckets;
    this.requests = requests;
    this.tokens = tokens;
    this.levels = levels;
  }
}

/** `EVALSHA` arguments for `batch`; `now` is a time in ms, or empty for the server clock. */
export function encodeBatch(batch: readonly BucketOp[], now: string): string[] {
  const keys = new Map<string, number>();
  const keyArgs: string[] = [];
  const paramArgs: string[] = [];
  const opArgs: string[] = [String(batch.length)];
  for (const op of batch) {
    opArgs.push(op.take ? 't' : 'a', String(op.requests), String(op.tokens), String(op.buckets.length));
    for (const b of op.buckets) {
      let k = keys.get(b.key);
      if (k === undefined) {
        k = keys.size + 1;
        keys.set(b.key, k);
        keyArgs.push(b.key);
        // String(number) is the shortest exact representation: the script computes with the same doubles.
        paramArgs.push(String(b.capacity), String(b.ratePerMs));
      }
      opArgs.push(String(k), b.unit === BucketUnit.tokens ? 't' : 'r');
    }
  }
  return ['EVALSHA', BUCKET_SCRIPT_SHA, String(keyArgs.length), ...keyArgs, now, ...paramArgs, ...opArgs];
}

/** Sets each operation's `status` and `levels` from the script's reply. Throws on a malformed reply. */
export function decodeBatch(reply: unknown, batch: readonly BucketOp[]): void {
  let expected = 0;
  for (const op of batch) expected += 1 + op.buckets.length;
  if (!Array.isArray(reply) || reply.length !== expected) {
    throw new Error('unexpected reply from the bucket script');
  }
  let r = 0;
  for (const op of batch) {
    op.status = Number(reply[r++]) === STATUS_REJECTED ? TakeStatus.rejected : TakeStatus.ok;
    const levels = op.levels;
    for (let i = 0; i < op.buckets.length; i++) {
      const level = Number(reply[r++]);
      if (levels !== null) levels[i] = level;
    }
  }
}

function noop(): void {}
