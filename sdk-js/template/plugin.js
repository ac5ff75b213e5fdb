// A template issuance policy: deny names under `deniedSuffix`, cap the validity at `maxDays`.
import { allow, definePolicy, deny, dnsNames, reason } from 'trellis-plugin-sdk';

export default definePolicy({
  info: {
    id: 'com.example.my-policy-js', // reverse-DNS, 3 to 64 characters
    version: '0.1.0',
    name: 'My policy (JS)',
    serves: ['my-policy-js'], // the policy type operators bind
    description: 'Denies names under one suffix and caps the validity.',
    // The SDK checks configurations against this before validateConfig/evaluate run.
    configSchema: {
      type: 'object',
      additionalProperties: false,
      properties: { deniedSuffix: { type: 'string' }, maxDays: { type: 'integer', minimum: 1 } },
    },
  },
  evaluate(ctx, config, request) {
    if (config.deniedSuffix) {
      const bad = dnsNames(request.subjectAltNames).filter((name) => name.endsWith(config.deniedSuffix));
      if (bad.length) return deny(bad.map((name) => reason('name-denied', `${name} is under ${config.deniedSuffix}`)));
    }
    if (config.maxDays && request.validityDays > config.maxDays) return allow(config.maxDays);
    return allow();
  },
});
