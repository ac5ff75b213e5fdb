// Native tests through the SDK's harness: `node --test test/`. The spinning path never returns,
// so natively only the other one is run.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { harness } from '../../../sdk-js/src/testing.js';
import plugin from '../plugin.js';

test('delivers nothing when not spinning', () => {
  const h = harness(plugin, { config: { spin: false } });
  assert.deepEqual(h.notify({ id: 'evt-1', eventType: 'certificate.created', summary: 's', data: '{}' }), { status: 200 });
});

test('the schema holds', () => {
  assert.throws(() => harness(plugin).validate({ spin: 'yes' }), (err) => err.kind === 'invalid-config');
});
