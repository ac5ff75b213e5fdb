import { test } from 'node:test';
import assert from 'node:assert/strict';
import { allow } from 'trellis-plugin-sdk';
import { evaluationRequest, harness } from 'trellis-plugin-sdk/testing';
import plugin from '../plugin.js';

test('denies and caps', () => {
  const h = harness(plugin, { config: { deniedSuffix: '.internal', maxDays: 30 } });
  assert.equal(h.evaluate(evaluationRequest({ dns: ['db.internal'] })).decision, 'deny');
  assert.deepEqual(h.evaluate(evaluationRequest({ dns: ['www.example.com'], validityDays: 90 })), allow(30));
});

test('the schema is checked', () => {
  assert.throws(() => harness(plugin).validate({ maxDays: 'thirty' }), (err) => err.kind === 'invalid-config');
});
