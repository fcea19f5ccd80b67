/**
 * What can be checked here of the deployment files without a container engine or a cluster: the
 * Kubernetes manifests against the Kubernetes API schemas (kubernetes-models), their probes and
 * ports against Sluice's admin endpoints and its config; the compose file's structure (and
 * `docker compose config` when a compose client is installed); the Dockerfile's stages and user;
 * the configs they ship pass Sluice's own validation; and every metric the Grafana dashboard
 * queries is one Sluice exports, and every family Sluice exports is documented.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments, parse } from 'yaml';
import { ConfigMap, Secret, Service } from 'kubernetes-models/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { loadConfigFile } from '../../config/loader.js';
import { findSluiceRoot } from '../../config/sluice-root.js';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { basicConfig, chatRequest, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import { hasTool } from '../helpers/tools.js';

const root = findSluiceRoot();
const K8S = join(root, 'deploy', 'k8s');

type Manifest = { kind: string; metadata: { name: string } } & Record<string, unknown>;

async function manifests(): Promise<Manifest[]> {
  const out: Manifest[] = [];
  for (const f of (await readdir(K8S)).sort()) {
    if (!f.endsWith('.yaml') || f === 'kustomization.yaml') continue;
    for (const doc of parseAllDocuments(await readFile(join(K8S, f), 'utf8'))) {
      assert.deepEqual(doc.errors, [], f);
      out.push(doc.toJS() as Manifest);
    }
  }
  return out;
}

/** Validates a Sluice config text with Sluice's loader; returns the error lines. */
async function sluiceCheck(text: string): Promise<string[]> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-deploy-'));
  try {
    const path = join(dir, 'sluice.yaml');
    await writeFile(path, text);
    const r = await loadConfigFile(path);
    return r.ok ? [] : r.errors.map((e) => JSON.stringify(e));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('Kubernetes manifests', { timeout: 30_000 }, () => {
  it('pass the Kubernetes API schemas', async () => {
    const classes: Record<string, new (o: never) => { validate(): void }> = {
      ConfigMap,
      Deployment,
      Service,
      PodDisruptionBudget,
      Secret,
    };
    const all = await manifests();
    assert.deepEqual(all.map((m) => m.kind).sort(), [
      'ConfigMap',
      'Deployment',
      'PodDisruptionBudget',
      'Secret',
      'Service',
    ]);
    for (const m of all) {
      const Cls = classes[m.kind];
      assert.ok(Cls !== undefined, m.kind);
      assert.doesNotThrow(() => new Cls(m as never).validate(), `${m.kind} ${m.metadata.name}`);
    }
  });

  it('probe the admin endpoints, expose the listener and admin ports of the config, and mount it where serve reads it', async () => {
    const all = await manifests();
    const dep = all.find((m) => m.kind === 'Deployment') as unknown as {
      spec: {
        template: {
          spec: {
            containers: {
              args: string[];
              ports: { name: string; containerPort: number }[];
              livenessProbe: { httpGet: { path: string; port: string } };
              readinessProbe: { exec: { command: string[] } };
              volumeMounts: { mountPath: string }[];
            }[];
            terminationGracePeriodSeconds: number;
          };
        };
      };
    };
    const c = dep.spec.template.spec.containers[0]!;
    assert.equal(c.livenessProbe.httpGet.path, '/healthz');
    assert.equal(c.livenessProbe.httpGet.port, 'admin');
    assert.match(c.readinessProbe.exec.command.join(' '), /127\.0\.0\.1:9901\/readyz/);
    const cm = all.find((m) => m.kind === 'ConfigMap') as unknown as { data: Record<string, string> };
    const config = parse(cm.data['sluice.yaml']!) as {
      listeners: { port: number }[];
      admin: { port: number };
      server: { drain_timeout_ms: number };
    };
    const ports = Object.fromEntries(c.ports.map((p) => [p.name, p.containerPort]));
    assert.equal(ports['http'], config.listeners[0]!.port);
    assert.equal(ports['admin'], config.admin.port);
    assert.ok(dep.spec.template.spec.terminationGracePeriodSeconds * 1000 > config.server.drain_timeout_ms);
    const configArg = c.args[c.args.indexOf('--config') + 1]!;
    assert.ok(c.volumeMounts.some((v) => configArg.startsWith(`${v.mountPath}/`)));
    const svc = all.find((m) => m.kind === 'Service') as unknown as {
      spec: { ports: { targetPort: string }[] };
    };
    assert.deepEqual(svc.spec.ports.map((p) => p.targetPort).sort(), ['admin', 'http']);
  });

  it("ship a Sluice config that Sluice's own validation accepts", async () => {
    const cm = (await manifests()).find((m) => m.kind === 'ConfigMap') as unknown as {
      data: Record<string, string>;
    };
    assert.deepEqual(await sluiceCheck(cm.data['sluice.yaml']!), []);
  });
});

describe('docker-compose.yml and Dockerfile', { timeout: 30_000 }, () => {
  it('start Sluice, Redis and simulated nodes with a config Sluice accepts', async () => {
    const compose = parse(await readFile(join(root, 'docker-compose.yml'), 'utf8')) as {
      services: Record<string, { command?: string[]; volumes?: string[]; ports?: string[]; build?: string }>;
    };
    assert.deepEqual(Object.keys(compose.services).sort(), ['nodes', 'redis', 'sluice']);
    const s = compose.services['sluice']!;
    assert.ok(s.ports?.includes('127.0.0.1:9901:9901'), 'the admin port is published on loopback only');
    const mount = s.volumes!.find((v) => v.endsWith(':/etc/sluice/sluice.yaml:ro'))!;
    const file = join(root, mount.split(':')[0]!);
    assert.deepEqual(await sluiceCheck(await readFile(file, 'utf8')), []);
    assert.equal(compose.services['nodes']!.command![0], 'sim');
  });

  it('passes `docker compose config` when a compose client is installed', (t) => {
    const cmd = hasTool('docker-compose')
      ? ['docker-compose', ['-f', 'docker-compose.yml', 'config', '-q']]
      : spawnSync('docker', ['compose', 'version'], { stdio: 'ignore' }).status === 0
        ? ['docker', ['compose', '-f', 'docker-compose.yml', 'config', '-q']]
        : null;
    if (cmd === null) {
      t.skip('no docker compose client here');
      return;
    }
    const r = spawnSync(cmd[0] as string, cmd[1] as string[], { cwd: root, encoding: 'utf8' });
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  });

  it('builds in one stage and runs Node 22 as the unprivileged node user in another', async () => {
    const text = await readFile(join(root, 'Dockerfile'), 'utf8');
    const stages = text.split('\n').filter((l) => l.startsWith('FROM '));
    assert.equal(stages.length, 2);
    assert.ok(stages.every((l) => /^FROM node:22-/.test(l)));
    const runtime = text.slice(text.lastIndexOf('\nFROM '));
    assert.match(runtime, /^USER node$/m);
    assert.match(runtime, /status-page\.html/);
    assert.match(text, /npm rebuild better-sqlite3/);
  });
});

describe('Grafana dashboard and docs against the metrics Sluice exports', { timeout: 60_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;
  let families = new Set<string>();

  before(async () => {
    process.env['SLUICE_TEST_DASHBOARD_KEY'] = 'dashboard-key';
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    t = await startTestSluice(
      basicConfig(
        fleet.urls,
        `tenants:
  - name: team
    keys: [{ env: SLUICE_TEST_DASHBOARD_KEY }]
`,
        { pool: '    admission: { max_queue: 8 }' },
      ),
    );
    const auth = { authorization: 'Bearer dashboard-key' };
    for (const stream of [false, true])
      await (await fetch(`${t.url}/v1/chat/completions`, chatRequest({ stream }, auth))).text();
    await (await fetch(`${t.url}/v1/chat/completions`, chatRequest())).text();
    const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
    families = new Set([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => m[1]!));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('queries only metric names Sluice exports', async () => {
    const dash = JSON.parse(
      await readFile(join(root, 'deploy', 'grafana', 'sluice-dashboard.json'), 'utf8'),
    ) as {
      panels: { title: string; targets: { expr: string }[] }[];
    };
    assert.ok(dash.panels.length >= 10);
    const used = new Set<string>();
    for (const p of dash.panels)
      for (const tg of p.targets)
        for (const m of tg.expr.matchAll(/\b((?:sluice|process)_[a-z0-9_]+)/g)) used.add(m[1]!);
    const unknown = [...used].filter((name) => {
      const base = name.replace(/_(bucket|sum|count)$/, '');
      return !families.has(name) && !families.has(base);
    });
    assert.deepEqual(unknown, []);
    assert.ok(used.size >= 15, `${used.size} metrics used`);
  });

  it('documents every metric family in docs/observability.md', async () => {
    const doc = await readFile(join(root, 'docs', 'observability.md'), 'utf8');
    const missing = [...families].filter((f) => !doc.includes(`\`${f}\``));
    assert.deepEqual(missing, []);
  });
});
