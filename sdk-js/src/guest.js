// The adapter between the component boundary (jco's bindings: records as camelCase objects,
// variants as { tag, val }, results of exports as return-or-throw) and the SDK's plain values.
// `trellis-plugin build` generates an entry that calls `makeGuest` with the world's imports.

import { PluginError, Response, setBackend, utf8Decode, utf8Encode } from './index.js';

const dispose = (resource) => (resource?.[Symbol.dispose] ?? resource?.[Symbol.for('dispose')])?.call(resource);

/** A thrown value as the plugin-error variant; jco reads `payload`, the case is also on the value. */
function fail(tag, val) {
  const err = new Error(`${tag}${typeof val === 'string' ? `: ${val}` : ''}`);
  err.payload = { tag, val };
  err.tag = tag;
  err.val = val;
  return err;
}

function asPluginError(err, logging) {
  if (err instanceof PluginError) {
    switch (err.kind) {
      case 'invalid-config':
        return fail('invalid-config', err.issues.map((i) => ({ field: i.field, message: i.message })));
      case 'upstream':
        return fail('upstream', { status: err.status ?? undefined, message: err.message, retryable: !!err.retryable });
      case 'rate-limited':
        return fail('rate-limited', err.retryAfter ?? undefined);
      case 'invalid-input': case 'unauthorized': case 'not-found': case 'not-supported':
      case 'conflict': case 'rejected': case 'internal':
        return fail(err.kind, err.message);
      default:
        return fail('internal', err.message);
    }
  }
  logging?.log('error', 'plugin threw', [{ key: 'error', value: String(err?.stack ?? err).slice(0, 2000) }]);
  return fail('internal', `${err?.name ?? 'Error'}: ${err?.message ?? err}`);
}

function parseConfig(config) {
  let value;
  try {
    value = JSON.parse(config);
  } catch (err) {
    throw new PluginError('invalid-config', 'not JSON', { issues: [{ field: '', message: `not JSON: ${err.message}` }] });
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new PluginError('invalid-config', 'not an object', { issues: [{ field: '', message: 'the configuration must be a JSON object' }] });
  }
  return value;
}

const ctxIn = (c) => ({ workspaceId: c.workspaceId, recordId: c.recordId, requestId: c.requestId, endpoint: c.endpoint, timeBudgetMs: c.timeBudgetMs });

function ipText(ip) {
  if (ip.tag === 'ipv4') return ip.val.join('.');
  return ip.val.map((g) => g.toString(16)).join(':').replace(/(^|:)0(:0)+(:|$)/, '::').replace(/:{3,}/, '::');
}
const sanIn = (s) => ({ kind: s.tag, value: s.tag === 'ip' ? ipText(s.val) : s.val });
const subjectIn = (s) => ({
  commonName: s.commonName, organization: s.organization, organizationalUnit: s.organizationalUnit,
  country: s.country, state: s.state, locality: s.locality, other: s.other.map((a) => [a.oid, a.value]),
});

function infoOut(plugin) {
  const info = plugin.info;
  const capabilities = {};
  for (const name of info.capabilities ?? []) capabilities[name.replace(/-([a-z])/g, (_, c) => c.toUpperCase())] = true;
  return {
    id: info.id, version: info.version, kind: plugin.world, name: info.name, description: info.description ?? '',
    serves: info.serves, configSchema: JSON.stringify(info.configSchema ?? { type: 'object' }),
    secretFields: (info.secretFields ?? []).map((f) => (typeof f === 'string' ? { pointer: f, withheld: false } : f)),
    capabilities, defaultIssuerPatterns: info.defaultIssuerPatterns ?? [], outboundHosts: info.outboundHosts ?? [],
  };
}

const reportOut = (r) => ({ success: r.success, message: r.message, checks: r.checks.map((c) => ({ name: c.name, status: c.status, message: c.message })), details: JSON.stringify(r.details ?? {}) });

function httpBackend(outgoingHandler, t) {
  if (!outgoingHandler) return () => { throw new PluginError('not-supported', "this plugin's world has no outbound HTTP"); };
  return (method, url, headers, body) => {
    let target;
    try {
      target = new URL(url);
    } catch {
      throw new PluginError('invalid-input', `not a URL: ${url}`);
    }
    if (target.protocol !== 'http:' && target.protocol !== 'https:') throw new PluginError('invalid-input', `not an http(s) URL: ${url}`);
    const entries = headers.map(([k, v]) => [k.toLowerCase(), utf8Encode(String(v))]);
    if (!entries.some(([k]) => k === 'content-length') && (body.length || !['GET', 'HEAD'].includes(method))) {
      // A declared length lets servers that do not take chunked uploads read the body.
      entries.push(['content-length', utf8Encode(String(body.length))]);
    }
    const request = new t.OutgoingRequest(t.Fields.fromList(entries));
    const known = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'];
    request.setMethod(known.includes(method) ? { tag: method.toLowerCase() } : { tag: 'other', val: method });
    request.setScheme({ tag: target.protocol === 'https:' ? 'HTTPS' : 'HTTP' }); // the WIT cases are upper case
    request.setAuthority(target.host);
    request.setPathWithQuery(`${target.pathname || '/'}${target.search}`);
    const outgoing = request.body();
    // `handle` before the body is written: the host buffers only a little of it and drains it
    // into the connection `handle` opens.
    let future;
    try {
      future = outgoingHandler.handle(request, undefined);
    } catch (err) {
      throw transportError(err.payload ?? err);
    }
    let writeError;
    try {
      const stream = outgoing.write();
      for (let at = 0; at < body.length; at += 4096) stream.blockingWriteAndFlush(body.subarray(at, at + 4096));
      dispose(stream);
      t.OutgoingBody.finish(outgoing, undefined);
    } catch (err) {
      writeError = err; // the response future carries the real reason when the host refused
    }
    let result = future.get();
    while (result === undefined) {
      const pollable = future.subscribe();
      pollable.block();
      dispose(pollable);
      result = future.get();
    }
    if (result.tag === 'err') throw new PluginError('upstream', 'the response was already taken', { retryable: false });
    if (result.val.tag === 'err') throw transportError(result.val.val);
    if (writeError) throw new PluginError('upstream', `sending the request body failed: ${writeError}`, { retryable: true });
    const response = result.val.val;
    const fields = response.headers();
    const outHeaders = fields.entries().map(([k, v]) => [k.toLowerCase(), utf8Decode(v)]);
    dispose(fields);
    const incoming = response.consume();
    const stream = incoming.stream();
    const chunks = [];
    let length = 0;
    for (;;) {
      try {
        const chunk = stream.blockingRead(65536n);
        chunks.push(chunk);
        length += chunk.length;
      } catch {
        break; // closed (or failed: what arrived is what the plugin gets)
      }
    }
    dispose(stream);
    const bytes = new Uint8Array(length);
    let at = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, at);
      at += chunk.length;
    }
    return new Response(response.status(), outHeaders, bytes);
  };
}

function transportError(code) {
  const tag = code?.tag ?? String(code);
  if (tag === 'HTTP-request-denied' || tag === 'http-request-denied' || tag === 'destination-IP-prohibited' || tag === 'destination-ip-prohibited') {
    return new PluginError('upstream', 'the host refused the outbound request (not an allowed destination)', { retryable: false });
  }
  return new PluginError('upstream', `outbound request failed: ${tag}`, { retryable: true });
}

/** The world's export object for `plugin`, given the world's imports. */
export function makeGuest(plugin, { logging, state, outgoingHandler, httpTypes }) {
  const stateCall = (name, ...args) => {
    if (!state) throw new PluginError('not-supported', "this plugin's world has no state");
    try {
      return state[name](...args);
    } catch (err) {
      throw new PluginError('internal', `state ${name} failed: ${JSON.stringify(err.payload ?? String(err))}`);
    }
  };
  setBackend({
    http: httpBackend(outgoingHandler, httpTypes),
    stateGet: (key) => stateCall('get', key),
    stateSet: (key, value) => stateCall('set', key, value),
    stateDelete: (key) => stateCall('delete', key),
    log: (level, message, fields) => logging.log(level, message, Object.entries(fields).map(([key, value]) => ({ key, value: String(value) }))),
  });
  const guarded = (run) => {
    try {
      return run();
    } catch (err) {
      throw asPluginError(err, logging);
    }
  };
  const common = {
    describe: () => infoOut(plugin),
    validateConfig: (config) => guarded(() => { plugin.validateConfig(parseConfig(config)); }),
  };
  if (plugin.world === 'issuance-policy') {
    const decisionOut = (d) => {
      const reasons = (rs) => rs.map((r) => ({ code: r.code, message: r.message }));
      if (d?.decision === 'allow') return { tag: 'allow', val: d.maxValidityDays ?? undefined };
      if (d?.decision === 'deny') return { tag: 'deny', val: reasons(d.reasons) };
      if (d?.decision === 'require-approval') return { tag: 'require-approval', val: reasons(d.reasons) };
      throw new PluginError('internal', 'evaluate must return allow(), deny() or requireApproval()');
    };
    const requestIn = (r) => ({
      caType: r.caType, caId: r.caId, template: r.template, subject: subjectIn(r.subject),
      subjectAltNames: r.subjectAltNames.map(sanIn), key: { ...r.key }, validityDays: r.validityDays,
      requester: { ...r.requester }, source: r.source,
    });
    return {
      ...common,
      evaluate: (ctx, config, request) => guarded(() => decisionOut(plugin.evaluate(ctxIn(ctx), parseConfig(config), requestIn(request)))),
    };
  }
  if (plugin.world === 'integration') {
    return {
      ...common,
      test: (ctx, config) => guarded(() => reportOut(plugin.test(ctxIn(ctx), parseConfig(config)))),
      notify: (ctx, config, e) => guarded(() => {
        const event = { id: e.id, eventType: e.eventType, occurredAt: Number(e.occurredAt), summary: e.summary, payload: e.payload };
        const d = plugin.notify(ctxIn(ctx), parseConfig(config), event) ?? {};
        return { status: d.status ?? undefined, reference: d.reference ?? undefined };
      }),
    };
  }
  // ca-connector
  const unsupported = (name) => () => { throw fail('not-supported', `${name} is not implemented by this connector`); };
  const pem = (text) => ({ tag: 'pem', val: text });
  const outcomeOut = (o) => {
    if (o?.outcome === 'issued') return { tag: 'issued', val: { certificate: pem(o.certificatePem), chain: (o.chainPem ?? []).map(pem), caReference: o.caReference ?? undefined } };
    if (o?.outcome === 'pending') return { tag: 'pending', val: { reference: o.reference, retryAfterSeconds: o.retryAfterSeconds ?? undefined, statusMessage: o.statusMessage } };
    throw new PluginError('internal', 'issue must return issued() or pending()');
  };
  const requestIn = (r) => ({
    idempotencyKey: r.idempotencyKey, csrDer: r.csr.der, csrPem: r.csr.pem, template: r.template, metadata: r.metadata,
    profile: {
      subject: subjectIn(r.profile.subject), subjectAltNames: r.profile.subjectAltNames.map(sanIn),
      keyUsages: Object.keys(r.profile.keyUsages).filter((k) => r.profile.keyUsages[k]),
      extendedKeyUsages: r.profile.extendedKeyUsages, validityDays: r.profile.validityDays,
    },
  });
  const optional = (name, fallback) => (plugin[name] ? plugin[name].bind(plugin) : fallback);
  const setup = optional('setup', () => {});
  const testConnection = optional('testConnection', () => { throw new PluginError('not-supported', 'test-connection'); });
  const pollIssue = optional('pollIssue', () => { throw new PluginError('not-supported', 'poll-issue'); });
  const caChain = optional('caChain', () => { throw new PluginError('not-supported', 'ca-chain'); });
  return {
    ...common,
    setup: (ctx, config) => guarded(() => { setup(ctxIn(ctx), parseConfig(config)); }),
    testConnection: (ctx, config) => guarded(() => reportOut(testConnection(ctxIn(ctx), parseConfig(config)))),
    issue: (ctx, config, request) => guarded(() => outcomeOut(plugin.issue(ctxIn(ctx), parseConfig(config), requestIn(request)))),
    pollIssue: (ctx, config, reference, request) => guarded(() => outcomeOut(pollIssue(ctxIn(ctx), parseConfig(config), reference, requestIn(request)))),
    fetchCertificate: unsupported('fetch-certificate'),
    caChain: (ctx, config) => guarded(() => caChain(ctxIn(ctx), parseConfig(config)).map(pem)),
    revoke: unsupported('revoke'),
    listCertificates: unsupported('list-certificates'),
    renewalInfo: unsupported('renewal-info'),
  };
}
