/**
 * `fanout` mode: a closed window goes to one node (picked once per micro-batch) and each item is
 * sent as its own single-item call, at most `maxConcurrentPerNode` at a time per node; requests
 * (the bytes the caller received, when it gave them) and answers pass through untouched. A failed
 * item is retried alone after backoff, on a node picked again.
 */

import { BatchDispatcher } from './batch-dispatcher.js';
import type { BatchItem } from './batch-item.js';
import type { BatchRun } from './batch-run.js';
import type { BatchTransport } from './batch-transport.js';
import { NodeGate } from './node-gate.js';

/** The fanout mode. Created by the micro-batcher. */
export class FanoutDispatcher extends BatchDispatcher {
  /** One gate per node; weak so a node dropped by a reload takes its gate with it. */
  private readonly gates = new WeakMap<BatchTransport, NodeGate>();

  dispatch(items: BatchItem[], run: BatchRun): void {
    const gate = this.gate();
    for (const item of items) item.run = run;
    if (gate === null) {
      for (const item of items) this.firstCallDone(item);
      this.noNode(items);
      return;
    }
    for (const item of items) gate.push(item);
    this.pump(gate);
  }

  protected resend(item: BatchItem): void {
    const gate = this.gate();
    if (gate === null) {
      this.noNode([item]);
      return;
    }
    gate.push(item);
    this.pump(gate);
  }

  private gate(): NodeGate | null {
    const transport = this.pick();
    if (transport === null) return null;
    let gate = this.gates.get(transport);
    if (gate === undefined) {
      gate = new NodeGate(transport, this.ctx.options.maxConcurrentPerNode);
      this.gates.set(transport, gate);
    }
    return gate;
  }

  /** Starts queued items while the node has free slots. // HOT */
  private pump(gate: NodeGate): void {
    for (let item = gate.take(); item !== null; item = gate.take()) void this.call(gate, item);
  }

  /** One single-item call. Never rejects. // HOT */
  private async call(gate: NodeGate, item: BatchItem): Promise<void> {
    item.attempts++;
    this.ctx.stats.upstreamCalls++;
    let status = 0;
    let answer: Buffer | null = null;
    let error: unknown = null;
    try {
      const body = item.raw ?? this.ctx.codec.encode([item.body]);
      ({ status, body: answer } = await gate.transport.send(body, 1));
    } catch (err) {
      error = err ?? new Error('transport rejected');
    }
    gate.running--;
    this.firstCallDone(item);
    if (answer === null) this.transportError([item], error);
    else this.answerOne(item, status, answer);
    this.pump(gate);
  }
}
