// A local test harness: run a plugin under Node (`node --test`) with fake host imports (HTTP,
// state, log), the configuration passed through JSON as the host passes it. No build needed.
//
//   const h = harness(plugin, { config: { allowedDnsSuffixes: ['.example.com'] } });
//   assert.deepEqual(h.evaluate(evaluationRequest({ dns: ['www.example.com'] })), allow());
import { Response, setBackend, utf8Decode, utf8Encode } from './index.js';

/** Answers outbound requests from routes; an unrouted request throws (tests fail loudly). */
export class FakeHttp {
  constructor() {
    this.routes = [];
    this.requests = [];
  }
  /** `answer`: a Response, or `(request) => Response`; a URL ending in `*` matches a prefix. */
  on(method, url, answer) {
    this.routes.push([method.toUpperCase(), url, answer]);
    return this;
  }
  handle(method, url, headers, body) {
    const request = { method, url, headers, body, json: () => JSON.parse(utf8Decode(body)) };
    this.requests.push(request);
    for (const [m, u, answer] of this.routes) {
      if (m === method && (u === url || (u.endsWith('*') && url.startsWith(u.slice(0, -1))))) {
        return typeof answer === 'function' ? answer(request) : answer;
      }
    }
    throw new Error(`unexpected outbound request ${method} ${url}`);
  }
}

/** A JSON response for routes. */
export const jsonResponse = (status, value) => new Response(status, [['content-type', 'application/json']], utf8Encode(JSON.stringify(value)));

export function harness(plugin, { config = {}, http = new FakeHttp(), ctx } = {}) {
  const host = { http, state: new Map(), logs: [] };
  const context = ctx ?? { workspaceId: 'ws-test', recordId: 'record-1', requestId: 'test-request', timeBudgetMs: 10000 };
  const install = () => setBackend({
    http: (...args) => http.handle(...args),
    stateGet: (key) => host.state.get(key),
    stateSet: (key, value) => host.state.set(key, value),
    stateDelete: (key) => host.state.delete(key),
    log: (level, message, fields) => host.logs.push({ level, message, fields }),
  });
  const roundTrip = (value) => JSON.parse(JSON.stringify(value));
  const call = (run) => {
    const parsed = roundTrip(config);
    install();
    plugin.validateConfig(parsed);
    return run(parsed);
  };
  if (!/^[a-z0-9._-]{3,64}$/.test(plugin.info.id)) throw new Error(`plugin id ${plugin.info.id} is not a valid id`);
  return {
    host,
    http,
    validate: (other = config) => { install(); plugin.validateConfig(roundTrip(other)); },
    evaluate: (request) => call((c) => plugin.evaluate(context, c, request)),
    notify: (event) => call((c) => plugin.notify(context, c, event)),
    test: () => call((c) => plugin.test(context, c)),
    issue: (request) => call((c) => plugin.issue(context, c, request)),
  };
}

export function evaluationRequest({ commonName, dns = [], ips = [], validityDays = 90, key, caType = 'internal', template } = {}) {
  return {
    caType, caId: 'ca-1', template,
    subject: { commonName, other: [] },
    subjectAltNames: [...dns.map((value) => ({ kind: 'dns', value })), ...ips.map((value) => ({ kind: 'ip', value }))],
    key: key ?? { algorithm: 'ec', sizeBits: 256, curve: 'p256', serverGenerated: false },
    validityDays,
    requester: { kind: 'user', id: 'user-1' },
    source: 'api',
  };
}

export function event({ eventType = 'certificate.expiring', summary = 'Certificate www.example.com expires in 7 days', data = {}, id = 'evt-1' } = {}) {
  return { id, eventType, occurredAt: Date.now(), summary, payload: JSON.stringify({ id, type: eventType, data }) };
}
