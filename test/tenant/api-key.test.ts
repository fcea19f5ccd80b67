/**
 * Unit tests of API-key extraction from request headers (`Authorization: Bearer`, `x-api-key`) and
 * of the digest operators put in configuration.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { apiKeyDigest, extractApiKey, type HeaderSource } from '../../proxy/tenant/api-key.js';

/** A header source over a plain object (names lower-case, as the session keeps them). */
function headers(h: Record<string, string>): HeaderSource {
  return { header: (name) => h[name] };
}

describe('api key extraction', () => {
  it('reads a bearer token from Authorization, whatever the scheme case and spacing', () => {
    assert.equal(extractApiKey(headers({ authorization: 'Bearer sk-1' })), 'sk-1');
    assert.equal(extractApiKey(headers({ authorization: 'bearer sk-2' })), 'sk-2');
    assert.equal(extractApiKey(headers({ authorization: '  BEARER   sk-3  ' })), 'sk-3');
    assert.equal(extractApiKey(headers({ authorization: 'BeArEr sk-6' })), 'sk-6');
    // The scheme is the word and one space: a tab, another word or a letter outside ASCII is not it.
    for (const value of [
      'Bearer\tsk-7',
      'Bearerx sk-8',
      'Bearez sk-9',
      'Be\u0430rer sk-10',
      '@earer sk-11',
    ]) {
      assert.equal(extractApiKey(headers({ authorization: value })), undefined, value);
    }
  });

  it('reads x-api-key when there is no Authorization header', () => {
    assert.equal(extractApiKey(headers({ 'x-api-key': 'sk-4' })), 'sk-4');
  });

  it('prefers the bearer token over x-api-key', () => {
    assert.equal(extractApiKey(headers({ authorization: 'Bearer sk-a', 'x-api-key': 'sk-b' })), 'sk-a');
  });

  it('ignores other Authorization schemes and falls back to x-api-key', () => {
    assert.equal(extractApiKey(headers({ authorization: 'Basic dXNlcjpwYXNz' })), undefined);
    assert.equal(
      extractApiKey(headers({ authorization: 'Basic dXNlcjpwYXNz', 'x-api-key': 'sk-5' })),
      'sk-5',
    );
  });

  it('treats an empty or whitespace-only key as no key', () => {
    assert.equal(extractApiKey(headers({ authorization: 'Bearer ' })), undefined);
    assert.equal(extractApiKey(headers({ authorization: 'Bearer    ' })), undefined);
    assert.equal(extractApiKey(headers({ 'x-api-key': '  ' })), undefined);
    assert.equal(extractApiKey(headers({})), undefined);
  });

  it('digests a key as lower-case hex SHA-256 of its UTF-8 bytes', () => {
    assert.equal(
      apiKeyDigest('sk-é'),
      createHash('sha256').update(Buffer.from('sk-é', 'utf8')).digest('hex'),
    );
    assert.match(apiKeyDigest('x'), /^[0-9a-f]{64}$/);
  });
});
