/**
 * What `GET /admin/config` masks: the password of any URL with user information, written however a
 * URL may spell it, and key digests; the rest of each value stays as written.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { redactUrlPassword, redactedConfig } from '../../proxy/admin/config-view.js';
import type { SluiceConfig } from '../../config/types.js';

describe('redactUrlPassword', () => {
  it('masks the password and keeps the scheme, user, host, port, path and query as written', () => {
    assert.equal(redactUrlPassword('redis://:s3cret@cache:6379'), 'redis://:****@cache:6379');
    assert.equal(
      redactUrlPassword('rediss://app:s3cret@Cache.local/0?x=1'),
      'rediss://app:****@Cache.local/0?x=1',
    );
    assert.equal(redactUrlPassword('http://u:p@[::1]:4318/v1/traces'), 'http://u:****@[::1]:4318/v1/traces');
  });

  it('masks a password holding ":" or "@" up to the last "@" before the host', () => {
    assert.equal(redactUrlPassword('redis://app:a:b@c@cache:6379'), 'redis://app:****@cache:6379');
  });

  it('leaves strings without a password alone', () => {
    for (const text of [
      'redis://cache:6379',
      'redis://app@cache:6379',
      'http://cache/path@v1',
      'http://cache/?q=a:b@c',
      'user:pass@host',
      'gpu',
      '',
    ]) {
      assert.equal(redactUrlPassword(text), text);
    }
  });
});

describe('redactedConfig', () => {
  it('masks URLs anywhere (plugin options too) and digests of keys, without changing the config', () => {
    const config = {
      admin: { address: '127.0.0.1', port: 9901, token: { env: 'ADMIN_TOKEN' } },
      tenants: [{ name: 'a', keys: [{ sha256: 'a'.repeat(64) }, { env: 'A_KEY' }], priority: 0, weight: 1 }],
      plugins: [{ name: 'x', use: './x.js', options: { sink: ['https://u:p@logs.example/in'] } }],
      batch_api: { jobs: { store: 'redis', redis: { url: 'redis://:pw@q:6379', key_prefix: 'sluice:' } } },
    } as unknown as SluiceConfig;
    const before = JSON.stringify(config);
    assert.deepEqual(redactedConfig(config), {
      admin: { address: '127.0.0.1', port: 9901, token: { env: 'ADMIN_TOKEN' } },
      tenants: [{ name: 'a', keys: [{ sha256: '****' }, { env: 'A_KEY' }], priority: 0, weight: 1 }],
      plugins: [{ name: 'x', use: './x.js', options: { sink: ['https://u:****@logs.example/in'] } }],
      batch_api: { jobs: { store: 'redis', redis: { url: 'redis://:****@q:6379', key_prefix: 'sluice:' } } },
    });
    assert.equal(JSON.stringify(config), before);
  });

  it('masks strings under credential names (api_key, token, authorization) and leaves max_tokens alone', () => {
    const config = {
      rate_limits: { default_max_tokens: 1024 },
      plugins: [
        {
          name: 'x',
          use: './x.js',
          options: { api_key: 'sk-live', auth: { token: 't0k', 'client-secret': 's' }, max_tokens: 9 },
        },
        { name: 'h', use: './h.js', options: { set: { Authorization: 'Bearer b' } } },
      ],
    } as unknown as SluiceConfig;
    assert.deepEqual(redactedConfig(config), {
      rate_limits: { default_max_tokens: 1024 },
      plugins: [
        {
          name: 'x',
          use: './x.js',
          options: { api_key: '****', auth: { token: '****', 'client-secret': '****' }, max_tokens: 9 },
        },
        { name: 'h', use: './h.js', options: { set: { Authorization: '****' } } },
      ],
    });
  });
});
