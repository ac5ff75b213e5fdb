// A CA connector in JavaScript (`trellis:plugin/ca-connector@0.2.0`, CA type `rest-ca-js`) for a
// small REST CA at the CA record's URL:
//   POST {url}/sign  { csr: PEM, idempotencyKey, validityDays, dnsNames }  →  { certificate: PEM, chain: [PEM], id }
//   GET  {url}/chain                                                       →  { chain: [PEM] }
// authenticated with `Authorization: Bearer <apiKey>` (a secret member). The URL is the record's,
// so the host lets the connector reach it and nothing else.
import {
  defineConnector, dnsNames, http, invalidInput, issued, log, rateLimited, rejected, testReport, unauthorized, upstream,
} from '../../sdk-js/src/index.js';

const SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['apiKey'],
  properties: {
    apiKey: { type: 'string', writeOnly: true, description: 'Bearer credential of the CA API (secret).' },
    profile: { type: 'string', description: 'The CA-side profile to issue under (optional).' },
  },
};

function base(ctx) {
  if (!ctx.endpoint) throw invalidInput('the CA record has no url: set it to the REST CA base URL');
  return ctx.endpoint.replace(/\/+$/, '');
}

function checked(response, what) {
  if (response.status === 401 || response.status === 403) throw unauthorized(`the CA refused the API key (HTTP ${response.status})`);
  if (response.status === 429) throw rateLimited(Number(response.header('retry-after')) || undefined);
  if (response.status === 400 || response.status === 422) {
    // The CA understood and refused: repeating the request will not help.
    throw rejected(`the CA refused to ${what}: ${response.json()?.error ?? `HTTP ${response.status}`}`);
  }
  if (response.status >= 300) throw upstream(`the CA answered HTTP ${response.status} to ${what}`, { status: response.status, retryable: response.status >= 500 });
  return response.json();
}

const auth = (config) => ({ authorization: `Bearer ${config.apiKey}`, accept: 'application/json' });

export default defineConnector({
  info: {
    id: 'trellis.rest-ca-js',
    version: '0.1.0',
    name: 'REST CA (JavaScript)',
    serves: ['rest-ca-js'],
    description: 'Issues through a small REST CA: the CSR to {url}/sign, the chain from {url}/chain.',
    configSchema: SCHEMA,
    secretFields: ['/apiKey'],
    capabilities: ['issue'],
    defaultIssuerPatterns: ['REST CA'],
  },
  testConnection(ctx, config) {
    let check;
    try {
      const { chain } = checked(http.get(`${base(ctx)}/chain`, auth(config)), 'list its chain');
      check = { name: 'chain', status: 'pass', message: `the CA serves a chain of ${chain.length}` };
    } catch (err) {
      check = { name: 'chain', status: 'fail', message: err.message };
    }
    return testReport('REST CA test', [check]);
  },
  issue(ctx, config, request) {
    const body = {
      csr: request.csrPem,
      idempotencyKey: request.idempotencyKey,
      validityDays: request.profile.validityDays,
      dnsNames: dnsNames(request.profile.subjectAltNames),
      profile: config.profile,
    };
    const answer = checked(http.postJson(`${base(ctx)}/sign`, body, auth(config)), 'sign the CSR');
    if (typeof answer?.certificate !== 'string') throw upstream('the CA answered without a certificate', { retryable: false });
    log.info('certificate issued', { reference: answer.id ?? '' });
    return issued(answer.certificate, { chainPem: answer.chain ?? [], caReference: answer.id });
  },
  caChain(ctx, config) {
    return checked(http.get(`${base(ctx)}/chain`, auth(config)), 'list its chain').chain;
  },
});
