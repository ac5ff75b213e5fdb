// Native tests with the SDK's fake HTTP: `node --test test/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeHttp, harness, jsonResponse } from '../../../sdk-js/src/testing.js';
import plugin from '../plugin.js';

const ctx = { workspaceId: 'ws', recordId: 'ca-1', requestId: 'r', endpoint: 'https://ca.example.net/v1/', timeBudgetMs: 5000 };
const request = {
  idempotencyKey: 'req-1', csrDer: new Uint8Array(), csrPem: '-----BEGIN CERTIFICATE REQUEST-----\n…', metadata: '{}',
  profile: { subject: { other: [] }, subjectAltNames: [{ kind: 'dns', value: 'a.example.com' }], keyUsages: [], extendedKeyUsages: [], validityDays: 30 },
};

test('issues through POST /sign with the bearer key', () => {
  const http = new FakeHttp().on('POST', 'https://ca.example.net/v1/sign', jsonResponse(201, { certificate: 'LEAF', chain: ['ROOT'], id: 'c-9' }));
  const h = harness(plugin, { config: { apiKey: 'k1' }, http, ctx });
  assert.deepEqual(h.issue(request), { outcome: 'issued', certificatePem: 'LEAF', chainPem: ['ROOT'], caReference: 'c-9' });
  const sent = http.requests[0];
  assert.deepEqual(sent.headers.find(([k]) => k === 'authorization'), ['authorization', 'Bearer k1']);
  assert.deepEqual(sent.json().dnsNames, ['a.example.com']);
  assert.equal(sent.json().validityDays, 30);
});

test('a refusal is rejected, a 503 retryable', () => {
  const http = new FakeHttp()
    .on('POST', 'https://ca.example.net/v1/sign', (req) => (req.json().idempotencyKey === 'req-1' ? jsonResponse(422, { error: 'name not allowed' }) : jsonResponse(503, {})));
  const h = harness(plugin, { config: { apiKey: 'k1' }, http, ctx });
  assert.throws(() => h.issue(request), (err) => err.kind === 'rejected' && /name not allowed/.test(err.message));
  assert.throws(() => h.issue({ ...request, idempotencyKey: 'req-2' }), (err) => err.kind === 'upstream' && err.retryable);
});

test('the API key is required', () => {
  assert.throws(() => harness(plugin).validate({}), (err) => err.kind === 'invalid-config' && err.issues[0].field === '/apiKey');
});
