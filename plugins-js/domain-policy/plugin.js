// The core rules of the first-party domain policy (plugins/domain-policy), in JavaScript: allowed
// DNS suffixes, wildcards, and a validity cap. Same reason codes and messages as the Rust policy,
// so one conformance suite (tests/tests/it/policy_conformance.rs) holds all three builds to the same
// answers. IP ranges, key rules, approval patterns and `appliesTo` are not part of the core set: a
// configuration naming them is refused (never silently ignored).
import { allow, checkSchema, definePolicy, deny, dnsNames, invalidConfig, reason } from '../../sdk-js/src/index.js';

export const SCHEMA = {
  type: 'object',
  additionalProperties: false,
  properties: {
    allowedDnsSuffixes: { type: ['array', 'null'], items: { type: 'string' }, description: 'Every DNS name must equal one of these (without its leading dot) or end with it dotted.' },
    allowWildcards: { type: ['boolean', 'null'], default: true, description: 'Whether `*.name` wildcard names are allowed.' },
    maxValidityDays: { type: ['integer', 'null'], minimum: 1, description: 'Longer requests are shortened to this many days (not denied).' },
  },
};

const asciiLower = (s) => s.replace(/[A-Z]/g, (c) => c.toLowerCase());
const normalize = (name) => asciiLower(name.endsWith('.') ? name.slice(0, -1) : name);
const DNS_CHAR = /^[A-Za-z0-9._-]$/;
const isIp = (text) => /^\d{1,3}(\.\d{1,3}){3}$/.test(text) && text.split('.').every((o) => Number(o) <= 255 && (o === '0' || !o.startsWith('0'))) || (text.includes(':') && /^[0-9a-f:.]+$/i.test(text));
const dnsLooking = (n) => n.includes('.') && !isIp(n) && n.split('.').every((l) => l.length > 0) && [...n].every((c) => DNS_CHAR.test(c) || c === '*');

function suffix(written) {
  const trimmed = written.startsWith('.') ? written.slice(1) : written;
  const bare = asciiLower(trimmed.endsWith('.') ? trimmed.slice(0, -1) : trimmed);
  if (!bare) return [null, `\`${written}\` is empty: name a domain, e.g. \`.example.com\``];
  if (/\s/.test(bare)) return [null, `\`${written}\` contains spaces`];
  if (bare.includes('*')) return [null, `\`${written}\` contains \`*\`: suffixes take no wildcards (\`.example.com\` allows every name under example.com)`];
  if (/[^\x00-\x7f]/.test(bare)) return [null, `\`${written}\` is not ASCII: write internationalized names as A-labels (\`xn--…\`)`];
  const bad = [...bare].find((c) => !DNS_CHAR.test(c));
  if (bad !== undefined) return [null, `\`${written}\` contains \`${bad}\`, which no DNS name contains`];
  if (bare.split('.').some((l) => !l)) return [null, `\`${written}\` has an empty label`];
  return [{ written, bare }, null];
}

function compile(config) {
  const issues = checkSchema(config, SCHEMA);
  let suffixes = null;
  const listed = config.allowedDnsSuffixes;
  if (Array.isArray(listed) && listed.every((s) => typeof s === 'string')) {
    suffixes = [];
    listed.forEach((written, i) => {
      const [compiled, problem] = suffix(written);
      if (problem) issues.push({ field: `/allowedDnsSuffixes/${i}`, message: problem });
      else suffixes.push(compiled);
    });
  }
  const allowWildcards = typeof config.allowWildcards === 'boolean' ? config.allowWildcards : true;
  const maxValidityDays = Number.isInteger(config.maxValidityDays) ? config.maxValidityDays : null;
  if (issues.length) throw invalidConfig(issues);
  return { suffixes, allowWildcards, maxValidityDays };
}

function decide(rules, request) {
  const commonName = request.subject.commonName || null;
  const names = [];
  for (const name of dnsNames(request.subjectAltNames)) {
    const normalized = normalize(name);
    if (!names.some((n) => n.normalized === normalized)) names.push({ shown: name, normalized, what: 'DNS name' });
  }
  if (commonName) {
    const normalized = normalize(commonName);
    if (dnsLooking(normalized) && !names.some((n) => n.normalized === normalized)) names.push({ shown: commonName, normalized, what: 'common name' });
  }
  const denied = [];
  for (const { shown, normalized, what } of names) {
    if (normalized.includes('*')) {
      const rest = normalized.startsWith('*.') ? normalized.slice(2) : '';
      if (!rest || rest.includes('*')) denied.push(reason('invalid_wildcard', `${what} ${shown} has a wildcard that is not the whole left-most label (only \`*.name\` is allowed)`));
      else if (!rules.allowWildcards) denied.push(reason('wildcard_not_allowed', `${what} ${shown} is a wildcard, and this policy allows no wildcards`));
    }
    if (rules.suffixes !== null) {
      const under = rules.suffixes.some(({ bare }) => normalized === bare || (normalized.endsWith(bare) && normalized.slice(0, -bare.length).endsWith('.')));
      if (!under) {
        const message = rules.suffixes.length === 0
          ? `${what} ${shown} is not allowed: this policy allows no DNS names`
          : `${what} ${shown} is not under an allowed DNS suffix (${rules.suffixes.map((s) => s.written).join(', ')})`;
        denied.push(reason('dns_suffix_not_allowed', message));
      }
    }
  }
  if (denied.length) return deny(denied);
  if (rules.maxValidityDays !== null && request.validityDays > rules.maxValidityDays) return allow(rules.maxValidityDays);
  return allow();
}

export default definePolicy({
  info: {
    id: 'trellis.domain-policy-js',
    version: '0.1.0',
    name: 'Domain policy (JavaScript)',
    serves: ['domain-policy-js'],
    description: "The domain policy's core rules in JavaScript: allowed DNS suffixes, wildcards, a validity cap.",
    configSchema: SCHEMA,
  },
  validateConfig(config) {
    compile(config);
  },
  // Compiled again on every call: cheap, and a configuration that slipped past validation fails
  // the call (which the host counts as a denial) rather than allowing everything.
  evaluate(ctx, config, request) {
    return decide(compile(config), request);
  },
});
