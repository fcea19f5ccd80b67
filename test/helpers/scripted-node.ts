/**
 * Test helper: a node scripted by the test (`node:http` on loopback) for behaviours no simulated
 * node has (a usage event after keep-alive comments, a stream that lingers after `[DONE]`, error
 * answers without usage), and the tenants section of a config that keys tenants by their digests.
 */
import { createHash } from 'node:crypto';
import { createServer, type RequestListener, type Server } from 'node:http';

/** A running scripted node. */
export interface ScriptedNode {
  readonly server: Server;
  /** `http://127.0.0.1:PORT`. */
  readonly url: string;
  /** Closes every connection, then the server (an open keep-alive connection cannot hold it). */
  close(): Promise<void>;
}

/** Starts a node answering with `handler` on a free loopback port. */
export async function startScriptedNode(handler: RequestListener): Promise<ScriptedNode> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const url = `http://127.0.0.1:${typeof addr === 'object' && addr !== null ? addr.port : 0}`;
  return {
    server,
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A node that records each request body it receives and answers every one the same way. */
export interface RecordingNode extends ScriptedNode {
  /** The bodies received, in arrival order, as text. */
  readonly received: string[];
}

/** Starts a node answering `status` with the JSON text `answer` and recording each request body. */
export async function startRecordingNode(status: number, answer: string): Promise<RecordingNode> {
  const received: string[] = [];
  const node = await startScriptedNode((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      received.push(raw);
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(answer);
    });
  });
  return { ...node, received };
}

/** A node answering OpenAI embeddings, one input or a native batch of them (see `startEmbeddingNode`). */
export interface EmbeddingNode extends ScriptedNode {
  /** Each call's `input` as the node received it (a string, or an array for a batch), in order. */
  readonly calls: (string | string[])[];
}

/**
 * Starts an embeddings node that answers each input with `embed(input)`, after `delayMs`, in the
 * shape a native micro-batch splits (`data[i].index` = the input's position).
 */
export async function startEmbeddingNode(
  embed: (input: string) => number[],
  delayMs = 0,
): Promise<EmbeddingNode> {
  const calls: (string | string[])[] = [];
  const node = await startScriptedNode((req, res) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (text += c));
    req.on('end', () => {
      const input = (JSON.parse(text) as { input: string | string[] }).input;
      calls.push(input);
      const inputs = Array.isArray(input) ? input : [input];
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            object: 'list',
            model: 'e',
            data: inputs.map((s, index) => ({ object: 'embedding', index, embedding: embed(s) })),
            usage: { prompt_tokens: inputs.length, total_tokens: inputs.length },
          }),
        );
      }, delayMs);
    });
  });
  return { ...node, calls };
}

/** One tenant of `tenantsSection`: its name, its API key (configured by digest) and its `limits` (YAML flow map). */
export interface TestTenant {
  name: string;
  key: string;
  limits: string;
}

/** The `tenants:` section of a config for `tenants`, each key given by its SHA-256 digest. */
export function tenantsSection(tenants: readonly TestTenant[]): string {
  const lines = ['tenants:'];
  for (const t of tenants) {
    const sha = createHash('sha256').update(t.key).digest('hex');
    lines.push(`  - name: ${t.name}`, `    keys: [{ sha256: ${sha} }]`, `    limits: ${t.limits}`);
  }
  return `${lines.join('\n')}\n`;
}
