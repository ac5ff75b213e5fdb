// Trellis plugins in JavaScript (contract trellis:plugin@0.2.0). Plugin code uses these plain
// values and never the bindings jco generates: src/guest.js converts at the component boundary,
// src/testing.js runs the same code under Node with fake host imports.

/** An error the plugin reports on purpose; `kind` is the WIT plugin-error case. Any other
 *  exception escaping plugin code is reported as `internal` with its message. */
export class PluginError extends Error {
  constructor(kind, message, extra = {}) {
    super(message);
    this.kind = kind;
    Object.assign(this, extra);
  }
}
/** Every problem of a configuration: `[{ field: '/member', message }]`. */
export const invalidConfig = (issues) =>
  new PluginError('invalid-config', issues.map((i) => `${i.field || '/'}: ${i.message}`).join('; '), { issues });
export const invalidInput = (message) => new PluginError('invalid-input', message);
export const unauthorized = (message) => new PluginError('unauthorized', message);
export const notFound = (message) => new PluginError('not-found', message);
export const notSupported = (message) => new PluginError('not-supported', message);
export const conflict = (message) => new PluginError('conflict', message);
export const rejected = (message) => new PluginError('rejected', message);
export const internal = (message) => new PluginError('internal', message);
/** The remote system failed; `retryable`: the same call may succeed later. */
export const upstream = (message, { status, retryable = false } = {}) =>
  new PluginError('upstream', message, { status, retryable });
export const rateLimited = (retryAfter) => new PluginError('rate-limited', 'rate limited', { retryAfter });

// Policy decisions.
/** Go ahead, optionally capping the validity (never lengthening it). */
export const allow = (maxValidityDays) => ({ decision: 'allow', maxValidityDays });
export const deny = (reasons) => ({ decision: 'deny', reasons });
export const requireApproval = (reasons) => ({ decision: 'require-approval', reasons });
export const reason = (code, message) => ({ code, message });

// Connector outcomes.
/** The leaf PEM (it may carry its chain), the chain PEMs, the CA's reference. */
export const issued = (certificatePem, { chainPem = [], caReference } = {}) => ({ outcome: 'issued', certificatePem, chainPem, caReference });
export const pending = (reference, statusMessage, retryAfterSeconds) => ({ outcome: 'pending', reference, statusMessage, retryAfterSeconds });

/** Successful exactly when no check failed. `checks`: `[{ name, status: 'pass'|'warn'|'fail'|'skip', message }]`. */
export const testReport = (message, checks = [], details = {}) => ({ success: checks.every((c) => c.status !== 'fail'), message, checks, details });

const TYPES = {
  object: (v) => v !== null && typeof v === 'object' && !Array.isArray(v),
  array: Array.isArray,
  string: (v) => typeof v === 'string',
  boolean: (v) => typeof v === 'boolean',
  integer: Number.isInteger,
  number: (v) => typeof v === 'number',
  null: (v) => v === null,
};

/** The JSON Schema subset the SDK checks before `validateConfig` (`type`, `properties`, `required`,
 *  `additionalProperties: false`, `items`, `enum`, `minimum`, `maximum`): every problem at its
 *  JSON pointer. The host checks the schema too; the plugin's `validateConfig` stays the authority. */
export function checkSchema(value, schema, pointer = '') {
  const issues = [];
  if (schema.type) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => TYPES[t]?.(value))) return [{ field: pointer, message: `wrong type: expected ${types.join(' or ')}` }];
  }
  if (schema.enum && !schema.enum.includes(value)) issues.push({ field: pointer, message: `must be one of ${schema.enum.join(', ')}` });
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) issues.push({ field: pointer, message: `must be at least ${schema.minimum}` });
    if (schema.maximum !== undefined && value > schema.maximum) issues.push({ field: pointer, message: `must be at most ${schema.maximum}` });
  }
  if (TYPES.object(value)) {
    const properties = schema.properties ?? {};
    for (const name of schema.required ?? []) if (!(name in value)) issues.push({ field: `${pointer}/${name}`, message: 'required member is missing' });
    for (const [name, member] of Object.entries(value)) {
      const escaped = `${pointer}/${name.replaceAll('~', '~0').replaceAll('/', '~1')}`;
      if (name in properties) {
        if (member !== null) issues.push(...checkSchema(member, properties[name], escaped));
      } else if (schema.additionalProperties === false) {
        issues.push({ field: escaped, message: `unknown member; known members: ${Object.keys(properties).join(', ')}` });
      }
    }
  }
  if (Array.isArray(value) && schema.items) value.forEach((item, i) => issues.push(...checkSchema(item, schema.items, `${pointer}/${i}`)));
  return issues;
}

function withDefaults(world, plugin) {
  const schema = () => plugin.info.configSchema ?? { type: 'object' };
  return {
    validateConfig(config) {
      const issues = checkSchema(config, schema());
      if (issues.length) throw invalidConfig(issues);
    },
    ...plugin,
    world,
  };
}

/** `{ info, validateConfig?(config), evaluate(ctx, config, request) }` → an issuance policy. */
export const definePolicy = (plugin) => withDefaults('issuance-policy', plugin);
/** `{ info, validateConfig?, test(ctx, config), notify(ctx, config, event) }` → an integration. */
export const defineNotifier = (plugin) => withDefaults('integration', plugin);
/** `{ info (capabilities: ['issue', …]), validateConfig?, setup?, testConnection?, issue, pollIssue?, caChain? }` → a CA connector. */
export const defineConnector = (plugin) => withDefaults('ca-connector', plugin);

// --- the host: outbound HTTP, per-record state, logging --------------------------------------

let backend = null;
/** Installed by src/guest.js inside a component, by src/testing.js under Node. */
export function setBackend(next) {
  backend = next;
}
function current() {
  if (!backend) throw new Error('no host: run plugin code inside a component or under trellis-plugin-sdk/testing');
  return backend;
}

// QuickJS has no TextEncoder/TextDecoder: UTF-8 by hand where they are missing.
export function utf8Encode(text) {
  if (typeof TextEncoder !== 'undefined') return new TextEncoder().encode(text);
  const binary = unescape(encodeURIComponent(text));
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
export function utf8Decode(bytes) {
  if (typeof TextDecoder !== 'undefined') return new TextDecoder().decode(bytes);
  let binary = '';
  for (let i = 0; i < bytes.length; i += 8192) binary += String.fromCharCode(...bytes.subarray(i, i + 8192));
  try {
    return decodeURIComponent(escape(binary));
  } catch {
    return binary;
  }
}

/** A response: `status`, `headers` (`[[lowercase name, value]]`), `body` (Uint8Array). */
export class Response {
  constructor(status, headers, body) {
    this.status = status;
    this.headers = headers;
    this.body = body;
  }
  header(name) {
    const found = this.headers.find(([k]) => k === name.toLowerCase());
    return found ? found[1] : undefined;
  }
  get text() {
    return utf8Decode(this.body);
  }
  json() {
    return JSON.parse(this.text || 'null');
  }
}

/** Blocking outbound HTTP, checked by the host on every request (record endpoint, granted hosts). */
export const http = {
  request(method, url, { headers = {}, body = new Uint8Array() } = {}) {
    const bytes = typeof body === 'string' ? utf8Encode(body) : body;
    return current().http(method.toUpperCase(), url, Object.entries(headers), bytes);
  },
  get(url, headers) {
    return http.request('GET', url, { headers });
  },
  postJson(url, value, headers = {}) {
    return http.request('POST', url, { headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(value) });
  },
};

/** Per-record key/value state (Uint8Array values), encrypted at rest by the host. */
export const state = {
  get: (key) => current().stateGet(key),
  set: (key, value) => current().stateSet(key, typeof value === 'string' ? utf8Encode(value) : value),
  delete: (key) => current().stateDelete(key),
};

/** Structured log lines into the host's pipeline. Never log secrets. */
export const log = Object.fromEntries(
  ['debug', 'info', 'warn', 'error'].map((level) => [level, (message, fields = {}) => current().log(level, message, fields)]),
);

/** The DNS names among a request's or profile's SANs. */
export const dnsNames = (sans) => sans.filter((s) => s.kind === 'dns').map((s) => s.value);
