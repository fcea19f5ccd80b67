/**
 * The worker's side of the job database: claim items under a lease, record each result exactly
 * once (keyed by item id), put an item back for a later attempt, and sweep batches forward
 * (finalize, finish cancels, expire, fail items that used up their attempts). Every method is one
 * transaction; it never executes anything.
 */

import {
  CANCELLED_ITEM,
  EXPIRED_ITEM,
  failUnfinishedItems,
  finishBatch,
  unfinishedItems,
} from './batch-files.js';
import type { JobDb } from './job-db.js';
import { storedOriginHeaders, UNKNOWN_ORIGIN } from './job-store.js';
import type { ItemResult, JobItem } from './job-types.js';

interface ClaimedRow {
  id: number;
  batch_id: string;
  idx: number;
  custom_id: string;
  method: string;
  url: string;
  body: string;
  attempts: number;
}

/**
 * What `record` and `fail` did: `duplicate` (the item already had a result; nothing changed),
 * `recorded`, or `last` (recorded, and it was the batch's last result: call `finalize`).
 */
export type RecordOutcome = 'duplicate' | 'recorded' | 'last';

/** A failure recorded instead of a response: OpenAI error-file `error` object. */
export interface ItemFailure {
  code: string;
  message: string;
}

/**
 * Queue operations over a job database. Wall-clock times (`clock`, ms since the epoch) because
 * leases must mean the same thing to every process sharing the file.
 */
export class ItemQueue {
  constructor(
    private readonly db: JobDb,
    private readonly clock: () => number = Date.now,
  ) {}

  /**
   * Leases up to `max` runnable items to `workerId` for `leaseMs` ms, oldest batch and lowest input
   * index first. Runnable: pending, or leased with an expired lease (its worker died or it waits for
   * a retry that is due). Moves the items' batches from `validating` to `in_progress`. Each item
   * carries its batch's owner and origin (host, route-matched headers).
   */
  claim(workerId: string, max: number, leaseMs: number): JobItem[] {
    if (max <= 0) return [];
    return this.db
      .transaction((): JobItem[] => {
        const now = this.clock();
        const rows = this.db
          .prepare(
            `UPDATE job_items SET state = 'leased', lease_owner = @workerId, lease_until = @until, attempts = attempts + 1
             WHERE id IN (
               SELECT i.id FROM job_items i JOIN job_batches b ON b.id = i.batch_id
               WHERE b.status IN ('validating', 'in_progress')
                 AND (i.state = 'pending' OR (i.state = 'leased' AND i.lease_until <= @now))
               ORDER BY i.id LIMIT @max)
             RETURNING id, batch_id, idx, custom_id, method, url, body, attempts`,
          )
          .all({ workerId, until: now + leaseMs, now, max }) as ClaimedRow[];
        const promote = this.db.prepare(
          "UPDATE job_batches SET status = 'in_progress', in_progress_at = ? WHERE id = ? AND status = 'validating'",
        );
        const batchOf = this.db.prepare('SELECT owner, host, headers FROM job_batches WHERE id = ?');
        const batches = new Map<string, { owner: string; host: string; headers: readonly string[] }>();
        for (const r of rows) {
          if (batches.has(r.batch_id)) continue;
          promote.run(Math.floor(now / 1000), r.batch_id);
          const b = batchOf.get(r.batch_id) as { owner: string; host: string | null; headers: string | null };
          batches.set(r.batch_id, {
            owner: b.owner,
            // A batch stored before origins were kept runs as it did: localhost, no client headers.
            host: b.host ?? UNKNOWN_ORIGIN.host,
            headers: storedOriginHeaders(b.headers),
          });
        }
        // RETURNING order is unspecified; hand items out in queue order.
        rows.sort((a, b) => a.id - b.id);
        return rows.map((r) => ({
          id: r.id,
          batchId: r.batch_id,
          owner: batches.get(r.batch_id)?.owner ?? '',
          host: batches.get(r.batch_id)?.host ?? UNKNOWN_ORIGIN.host,
          headers: batches.get(r.batch_id)?.headers ?? [],
          index: r.idx,
          customId: r.custom_id,
          method: r.method,
          url: r.url,
          body: r.body,
          attempts: r.attempts,
        }));
      })
      .immediate();
  }

  /**
   * Records the response of an item: 2xx counts as completed, anything else as failed. Returns
   * `duplicate` (and changes nothing) when the item already has a result — a second execution after a lease
   * expired, or a batch cancelled or expired meanwhile — so each item has exactly one result.
   */
  record(itemId: number, result: ItemResult): RecordOutcome {
    const ok = result.status >= 200 && result.status < 300;
    return this.finish(
      itemId,
      ok ? 'completed' : 'failed',
      result.status,
      JSON.stringify(result.body ?? null),
      null,
    );
  }

  /** Records a final failure without a response (attempts used up); same exactly-once rule as `record`. */
  fail(itemId: number, failure: ItemFailure): RecordOutcome {
    return this.finish(itemId, 'failed', null, null, failure);
  }

  /**
   * Gives an item back for another attempt no sooner than `delayMs` from now, if `workerId` still
   * holds its lease. Returns false when it did not (the lease moved on or the item is done).
   */
  retryLater(itemId: number, workerId: string, delayMs: number): boolean {
    const { changes } = this.db
      .prepare(
        `UPDATE job_items SET lease_owner = NULL, lease_until = ? WHERE id = ? AND state = 'leased' AND lease_owner = ?`,
      )
      .run(this.clock() + delayMs, itemId, workerId);
    return changes === 1;
  }

  /**
   * Moves batches forward and returns how many it changed: items of running batches whose lease
   * expired, still held, after `maxAttempts` claims fail with `max_attempts_exceeded` (a poison item
   * must not crash workers forever; an item its worker gave back, as a drain does, runs again; in a
   * cancelling batch the cancel takes them); overdue batches expire (unfinished items fail with `batch_expired`); `cancelling`
   * batches with nothing in flight become `cancelled`; `finalizing` batches complete (a crash
   * between the last result and the end of the batch lands here).
   */
  sweep(maxAttempts: number): number {
    return this.db
      .transaction((): number => {
        const now = this.clock();
        const nowS = Math.floor(now / 1000);
        let changed = 0;
        const poisoned = this.db
          .prepare(
            `SELECT i.id FROM job_items i JOIN job_batches b ON b.id = i.batch_id
             WHERE b.status = 'in_progress' AND i.state = 'leased' AND i.lease_owner IS NOT NULL
               AND i.lease_until <= ? AND i.attempts >= ?`,
          )
          .all(now, maxAttempts) as { id: number }[];
        for (const { id } of poisoned) {
          this.fail(id, {
            code: 'max_attempts_exceeded',
            message: `no result after ${maxAttempts} attempts`,
          });
          changed++;
        }
        const overdue = this.db
          .prepare(
            "SELECT id FROM job_batches WHERE status IN ('validating', 'in_progress') AND expires_at <= ?",
          )
          .all(nowS) as { id: string }[];
        for (const { id } of overdue) {
          failUnfinishedItems(this.db, id, EXPIRED_ITEM, now, true);
          finishBatch(this.db, id, 'expired', nowS);
          changed++;
        }
        const cancelling = this.db
          .prepare("SELECT id FROM job_batches WHERE status = 'cancelling'")
          .all() as { id: string }[];
        for (const { id } of cancelling) {
          failUnfinishedItems(this.db, id, CANCELLED_ITEM, now, false);
          if (unfinishedItems(this.db, id) === 0) {
            finishBatch(this.db, id, 'cancelled', nowS);
            changed++;
          }
        }
        const finalizing = this.db
          .prepare("SELECT id FROM job_batches WHERE status = 'finalizing'")
          .all() as { id: string }[];
        for (const { id } of finalizing) {
          finishBatch(this.db, id, 'completed', nowS);
          changed++;
        }
        return changed;
      })
      .immediate();
  }

  /** True when some batch still has work for a worker (runnable or leased items, or a batch to end). */
  hasWork(): boolean {
    const row = this.db
      .prepare(
        `SELECT EXISTS (SELECT 1 FROM job_batches WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling')) AS busy`,
      )
      .get() as { busy: number };
    return row.busy === 1;
  }

  /** Items not finished yet (pending, leased or waiting for a retry) across every batch. */
  backlog(): number {
    return this.db
      .prepare("SELECT COUNT(*) FROM job_items WHERE state IN ('pending', 'leased')")
      .pluck()
      .get() as number;
  }

  private finish(
    itemId: number,
    outcome: 'completed' | 'failed',
    statusCode: number | null,
    response: string | null,
    failure: ItemFailure | null,
  ): RecordOutcome {
    return this.db
      .transaction((): RecordOutcome => {
        const now = this.clock();
        const row = this.db
          .prepare(
            `UPDATE job_items SET state = 'done', outcome = ?, status_code = ?, response = ?, error_code = ?,
               error_message = ?, finished_at = ?, lease_owner = NULL WHERE id = ? AND state != 'done' RETURNING batch_id`,
          )
          .get(
            outcome,
            statusCode,
            response,
            failure?.code ?? null,
            failure?.message ?? null,
            now,
            itemId,
          ) as { batch_id: string } | undefined;
        if (row === undefined) return 'duplicate';
        const batch = this.db
          .prepare(
            `UPDATE job_batches SET completed = completed + ?, failed = failed + ? WHERE id = ?
             RETURNING status, total, completed, failed`,
          )
          .get(outcome === 'completed' ? 1 : 0, outcome === 'failed' ? 1 : 0, row.batch_id) as
          { status: string; total: number; completed: number; failed: number } | undefined;
        if (batch !== undefined && batch.completed + batch.failed === batch.total) {
          const nowS = Math.floor(now / 1000);
          if (batch.status === 'in_progress') {
            this.db
              .prepare("UPDATE job_batches SET status = 'finalizing', finalizing_at = ? WHERE id = ?")
              .run(nowS, row.batch_id);
            return 'last';
          }
          if (batch.status === 'cancelling') finishBatch(this.db, row.batch_id, 'cancelled', nowS);
        }
        return 'recorded';
      })
      .immediate();
  }

  /** Completes a batch left in `finalizing`; separate from `record` so `finalizing` is a durable step. */
  finalize(batchId: string): void {
    this.db
      .transaction(() => {
        const row = this.db.prepare('SELECT status FROM job_batches WHERE id = ?').get(batchId) as
          { status: string } | undefined;
        if (row?.status === 'finalizing')
          finishBatch(this.db, batchId, 'completed', Math.floor(this.clock() / 1000));
      })
      .immediate();
  }
}
