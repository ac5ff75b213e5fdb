// Native tests through the SDK's harness: `node --test test/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { allow } from '../../../sdk-js/src/index.js';
import { harness, evaluationRequest } from '../../../sdk-js/src/testing.js';
import plugin from '../plugin.js';

test('suffixes and wildcards', () => {
  const h = harness(plugin, { config: { allowedDnsSuffixes: ['.example.com'], allowWildcards: false } });
  assert.deepEqual(h.evaluate(evaluationRequest({ commonName: 'www.example.com' })), allow());
  const denied = h.evaluate(evaluationRequest({ commonName: 'www.example.org', dns: ['*.example.com', 'badexample.com'] }));
  assert.equal(denied.decision, 'deny');
  assert.deepEqual(denied.reasons.map((r) => r.code), ['wildcard_not_allowed', 'dns_suffix_not_allowed', 'dns_suffix_not_allowed']);
  assert.equal(denied.reasons[1].message, 'DNS name badexample.com is not under an allowed DNS suffix (.example.com)');
});

test('validity is capped', () => {
  const h = harness(plugin, { config: { maxValidityDays: 30 } });
  assert.deepEqual(h.evaluate(evaluationRequest({ commonName: 'a.example.com', validityDays: 200 })), allow(30));
  assert.deepEqual(h.evaluate(evaluationRequest({ commonName: 'a.example.com', validityDays: 7 })), allow());
});

test('bad configurations list every problem', () => {
  const h = harness(plugin);
  assert.throws(() => h.validate({ allowedDnsSuffixes: ['', '*.x.com'], maxValidityDays: 0, allowedIpRanges: [] }), (err) => {
    assert.equal(err.kind, 'invalid-config');
    assert.deepEqual(err.issues.map((i) => i.field).sort(), ['/allowedDnsSuffixes/0', '/allowedDnsSuffixes/1', '/allowedIpRanges', '/maxValidityDays']);
    return true;
  });
});
