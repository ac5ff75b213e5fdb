// Test fixture (crates/plugin-host/src/tests/languages.rs): an integration in JavaScript, built
// with StarlingMonkey (SpiderMonkey), whose `notify` loops forever when the configuration has
// `spin: true` and delivers nothing otherwise. The host must stop the loop at the integration
// kind's CPU budget (epoch interruption inside the engine's interpreter) and keep serving.
import { defineNotifier, testReport } from '../../sdk-js/src/index.js';

export default defineNotifier({
  info: {
    id: 'trellis.fixture.spin-loop-js',
    version: '0.1.0',
    name: 'Spin loop (JavaScript fixture)',
    serves: ['fixture-spin-loop-js'],
    description: 'Never returns from notify when configured to spin.',
    configSchema: { type: 'object', additionalProperties: false, properties: { spin: { type: 'boolean' } } },
  },
  test() {
    return testReport('spin loop', [{ name: 'config', status: 'pass', message: 'nothing to reach' }]);
  },
  notify(ctx, config) {
    let count = 0;
    // Pure engine work, no host call: only the CPU budget can end it.
    while (config.spin) count += 1;
    return { status: 200 };
  },
});
